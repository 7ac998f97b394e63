#!/usr/bin/env bash
# One-off experiments after the check (not committed).
out=$1; B=/tmp/bw
export LD_LIBRARY_PATH=$B/lib BATON_SOCKET_IFNAME=lo BATON_TIMEOUT=20
cd $B
t() { local s=$1; shift; echo "=== $*"; timeout -k 5 $s "$@" 2>&1 | grep -vE '^#  Rank|^# (nccl|Collective|nThread|Using)|^#$' | tail -${TAIL:-14}; }
{
BATON_BIND=none t 30 bin/batonrun -n 2 bin/all_reduce_perf -B cuda -b 8 -e 64K -f 8 -n 50 -w 5
BATON_BIND=none TAIL=30 t 35 bin/batonrun -n 2 bin/all_reduce_perf -B cuda -b 8 -e 1G -f 4 -n 5 -w 1
TAIL=40 BATON_DEBUG=INFO BATON_DEBUG_SUBSYS=COLL t 40 tests/cuda_test --gtest_filter='*Pool*'
TAIL=30 t 60 tests/cuda_test --gtest_filter='-*Pool*'
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpsx CUDA_MPS_LOG_DIRECTORY=/tmp/mpsx-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && echo "MPS on"
TAIL=20 t 40 tests/cuda_test --gtest_filter='*Pool*:*InPlaceAlltoAll*'
BATON_DEBUG=WARN t 60 bin/batonrun -n 2 bin/baton-train --device cuda --epochs 1 --data data
echo quit | nvidia-cuda-mps-control
} > $out/extra.txt 2>&1
