// Cross-memory attach: copies between this process and a peer process of
// the same host with process_vm_readv / process_vm_writev, one pass through
// memory (the kernel pins the peer's pages and copies). What the single-copy
// collectives on ordinary buffers (comm/host_cma.cc) move their bytes with;
// whether a peer may be read at all is probed once per communicator
// (ChannelSet::ProbePeerMemory), since Yama, a missing CAP_SYS_PTRACE, other
// users or a non-dumpable peer make the kernel refuse.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace baton {

// Copies `bytes` from address `remote` of process `pid` to `local`: all of
// them, or an error (the peer gone: batonRemoteError; refused: the errno).
Status CmaRead(int pid, void* local, uint64_t remote, size_t bytes);
// Copies `bytes` from `local` to address `remote` of process `pid`.
Status CmaWrite(int pid, uint64_t remote, const void* local, size_t bytes);

// One process_vm_readv of `bytes` at `remote` of `pid` into `local`:
// 0 when all arrived, else the errno (EFAULT for a short read).
int CmaTryRead(int pid, void* local, uint64_t remote, size_t bytes);

// The kernel's copy against user space's on this machine: the rate of
// process_vm_readv from this process into itself over the rate of memcpy,
// both best of a few copies of the same 2 MiB (0 when the kernel refuses).
// On a virtual machine the kernel's copy can run at a third of memcpy's
// rate (docs/performance.md), which makes a single copy slower than two
// copies through shared memory. Measured once per process (about 2 ms
// here) and remembered; thread-safe.
double CmaCopySpeed();

}  // namespace baton
