# Sourced with a Python as $1 (the project venv's) by ci/test.sh and ci/gpu-bundle.sh: NCCL for
# the build is /usr/local/cuda's where it has one, else that Python's nvidia-nccl-cu13 (pinned
# in ci/requirements.txt to the GPU machine's NCCL), named by NCCL_ROOT, which
# cmake/FindNCCL.cmake reads.
if [ ! -f /usr/local/cuda/include/nccl.h ]; then
  NCCL_ROOT=$("$1" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])')
  export NCCL_ROOT
fi
