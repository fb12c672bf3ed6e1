# Sourced THERE by the scripts/device_*_check.sh scripts, with `root` and `out` set: makes OUTDIR,
# defines tz (OUTDIR as <out>.tgz: the device returns few files) and el (a line with the seconds
# since the start), records nvidia-smi, builds the GPU tests and the CLI (on failure: the build
# log's tail, the archive, exit 1) and puts the unpacked libraries on LD_LIBRARY_PATH.
mkdir -p "$out"
tz() { tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"; }
S=$(date +%s); el() { echo "[$(( $(date +%s) - S ))s] $*"; }
nvidia-smi >"$out/smi.txt" 2>&1
bash "$root/scripts/device_build.sh" detforge_gpu_tests detforge_cli >"$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; tz; exit 1; }
el built
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
