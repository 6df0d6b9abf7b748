# Sourced by device.sh and device-tests.sh: makes libcublas loadable for the `cublas` matmul
# (switchyard-cube loads it at run time) where the loader's cache has none, from the CUDA
# toolkit ($CUDA_PATH, else /usr/local/cuda) or else the wheels PyTorch brings, and prints
# where it looked.
if ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so'; then
    cublas_dirs=$(python3 -c 'import glob, os, site
dirs = {os.path.dirname(p) for d in site.getsitepackages()
        for p in glob.glob(d + "/nvidia/**/libcublas.so*", recursive=True)}
print(" ".join(sorted(dirs)))' 2>/dev/null || true)
    for d in "${CUDA_PATH:-/usr/local/cuda}/lib64" $cublas_dirs; do
        if [[ -d $d ]]; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
    done
fi
echo "cuBLAS: LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}; $(ldconfig -p 2>/dev/null | grep -c 'libcublas\.so' || true) libcublas in the loader's cache"
