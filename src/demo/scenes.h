// Deterministic synthetic demo scenes for the shapes checkpoints (models/rtdetr_v2_*_shapes):
// the 8 shape classes of ../shared/tools/shapes/scenes.py drawn the same way (filled polygons,
// filled circles, rings; random solid colours, optional outlines) on procedural backgrounds
// (gradients, soft blobs, noise; no photos), with their ground-truth boxes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "detforge/types.h"

namespace detforge::demo {

// Label ids as the checkpoints' id2label: 0 circle, 1 square, 2 triangle, 3 diamond, 4 star,
// 5 cross, 6 ring, 7 hexagon.
const std::vector<std::string>& shape_class_names();

struct DemoScene {
  ImageU8 image;                 // width x height RGB
  std::vector<Detection> truth;  // box in pixels, label, label_name, score 1
};

// Square by default, as the training scenes: the model resizes every input to 640x640 without
// keeping the aspect, so on a 640x480 scene each shape is stretched by 4/3 vertically. Measured
// with the PyTorch r18vd shapes model on 24 scenes of 640x480: recall 0.68 at score 0.5, most
// squares taken for diamonds (a turned square stretched becomes a rhombus); on 16 square scenes
// (seed 1): recall 0.99 (79 of 80 shapes, class and IoU >= 0.5), the extra detections being
// mostly duplicates of a true shape.
constexpr int kSceneWidth = 640;
constexpr int kSceneHeight = 640;

// `count` scenes; scene i depends only on (seed, i), on every machine (own RNG, no std::
// distributions). Each holds 3 to 7 shapes, radius 18 to 110 px, fully inside the image and
// barely overlapping, coloured to stand out from the background under them.
// width and height from 64 to 4096.
std::vector<DemoScene> make_demo_scenes(int count, uint32_t seed, int width = kSceneWidth,
                                        int height = kSceneHeight);

// The images alone.
std::vector<ImageU8> make_demo_images(int count, uint32_t seed, int width = kSceneWidth, int height = kSceneHeight);

}  // namespace detforge::demo
