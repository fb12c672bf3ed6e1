// A COCO detection dataset (instances JSON + image folder) and COCO detection results, as
// pycocotools reads them for bbox evaluation. Only the fields bbox AP needs are kept.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

namespace detforge::eval {

struct CocoImage {
  int64_t id = 0;
  std::string file_name;
  int width = 0;
  int height = 0;
};

struct CocoCategory {
  int64_t id = 0;
  std::string name;
};

struct CocoAnnotation {
  int64_t id = 0;
  int64_t image_id = 0;
  int64_t category_id = 0;
  double bbox[4] = {0, 0, 0, 0};  // x, y, w, h in pixels
  // The JSON's own "area" (for real COCO it is the segmentation's area, not w*h; pycocotools uses
  // it for the small/medium/large ranges). When the file has none we use w*h.
  double area = 0;
  bool iscrowd = false;
};

struct CocoDataset {
  std::filesystem::path annotations_path;
  std::filesystem::path images_dir;
  std::vector<CocoImage> images;            // in file order
  std::vector<CocoAnnotation> annotations;  // in file order (pycocotools' tie order)
  std::vector<CocoCategory> categories;     // in file order

  // A folder holding instances.json and images/ (the layout of ../shared/data/*).
  static CocoDataset load_dir(const std::filesystem::path& dir);
  // An instances JSON and the folder its file_names are relative to. Throws detforge::Error
  // naming the file and the field on a missing file, bad JSON or a malformed record.
  static CocoDataset load(const std::filesystem::path& annotations_json,
                          const std::filesystem::path& images_dir);
  // Parses an already-read JSON text (tests); `what` names it in errors.
  static CocoDataset parse(const std::string& json_text, const std::string& what);

  std::filesystem::path image_path(const CocoImage& img) const { return images_dir / img.file_name; }
  const CocoImage* find_image(int64_t id) const;
  const CocoCategory* find_category(int64_t id) const;

 private:
  std::unordered_map<int64_t, size_t> image_index_;
  std::unordered_map<int64_t, size_t> category_index_;
  void build_index(const std::string& what);
};

// One detection in COCO results format (the list pycocotools' loadRes reads).
struct CocoResult {
  int64_t image_id = 0;
  int64_t category_id = 0;
  double bbox[4] = {0, 0, 0, 0};  // x, y, w, h
  double score = 0;
};

// Reads a COCO results file: a JSON list of {image_id, category_id, bbox, score}.
std::vector<CocoResult> load_coco_results(const std::filesystem::path& path);
std::vector<CocoResult> parse_coco_results(const std::string& json_text, const std::string& what);
// Writes results as a JSON list (full double precision), atomically.
void save_coco_results(const std::vector<CocoResult>& results, const std::filesystem::path& path);

}  // namespace detforge::eval
