# Session 26, quality call: fp32/fp16 on shapes_val256 with the current defaults (FE3 etc.):
# Run as: run(command="timeout 200 bash .devq/q.sh", carry=[".devq"]) with ../shared/data/coco_val80 copied into .devq/ (the device tree, 46 MB, plus the data stays under 64 MiB).
# AP, fp16-vs-fp32 agreement at 0.3, non-finite scan with the stress inputs.
mkdir -p $OUT/q; S=$(date +%s)
git log --oneline -1 > $OUT/q/commit.txt
[ -x build-device/detforge ] || bash scripts/device_build.sh detforge_cli > $OUT/q/build.log 2>&1 || { tail -30 $OUT/q/build.log; exit 1; }
echo "built $(( $(date +%s) - S )) s"
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/q/smi.txt
timeout 500 bash scripts/device_quality.sh .devq/coco_val80 $OUT/q --stress > $OUT/q/quality.log 2>&1; echo "quality rc $?"
grep -E "rc=|precision|recall|AP|non-finite|finite" $OUT/q/quality.log | head -40
echo "done $(( $(date +%s) - S )) s"
