// The dataset options that eval, compare and scan share: a COCO folder, or annotations + images.
#pragma once
#include <CLI/CLI.hpp>

#include "eval/dataset_runner.h"

namespace detforge::cli {

inline void add_dataset_options(CLI::App* sub, eval::DatasetSource& data) {
  sub->add_option("--dataset", data.dir, "COCO folder with instances.json and images/");
  sub->add_option("--annotations", data.annotations, "COCO instances JSON (with --images)");
  sub->add_option("--images", data.images, "folder the annotations' file_names are in");
}

}  // namespace detforge::cli
