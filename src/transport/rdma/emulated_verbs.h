// An emulated RDMA device for tests (BATON_IB_EMULATE=1): the verbs of
// verbs.h between processes of one machine, so that the RDMA protocol and
// its set-up run, with injected faults, where no NIC exists.
//
// How it emulates the hardware:
//  - Registered memory lives in a named shared-memory object
//    (/dev/shm/baton-ibemu-PID-mKEY); the rkey names it, and a peer's
//    "NIC" maps it on first use to place RDMA writes by address.
//  - A registered user buffer (RegisterUser) is a descriptor of the same
//    name (address and length, no data); writes into it are placed with
//    process_vm_writev, and a deregistered rkey fails the write.
//  - Each queue pair has an inbox (/dev/shm/baton-ibemu-PID-qQPN): the
//    ring of immediate data that writes with immediate deliver, and the
//    count of receives posted there. A write with immediate and no posted
//    receive completes with an error (hardware would stall on RNR), so the
//    protocol's receive accounting is checked, not assumed.
//  - A completion channel is a Unix datagram socket (a file in /dev/shm,
//    so that processes in different network namespaces reach it) that every
//    delivery pokes: its fd becomes readable like ibv_comp_channel's.
//  - Writes are performed by the poster's thread at post time (or when
//    held deliveries are released), data before the immediate data, so a
//    receiver that sees a completion sees the bytes. Inline writes take
//    their bytes at post time, others when performed (a held write sees
//    later changes to its source, as a NIC may).
//  - The send queue is bounded as on hardware: an unsignaled write makes
//    no completion (unless it fails) and keeps its entry until a later
//    signaled write's completion is polled; posting to a full queue fails.
// Names carry the pid; the objects are unlinked when their owner destroys
// them (a crashed test leaves them in /dev/shm).
#pragma once

#include <cstdint>
#include <memory>

#include "transport/rdma/verbs.h"

namespace baton::rdma {

std::unique_ptr<Provider> MakeEmulatedProvider();

// Faults for tests; process-wide, read by every emulated object.
struct EmulatedFaults {
  // The n-th write posted from now (1: the next) completes with an error,
  // and its queue pair then flushes every later request; 0: none.
  int fail_write_at = 0;
  // Writes are parked (not delivered, not completed) while set; they go
  // out in order once it is cleared (credit stalls, slow networks).
  bool hold_deliveries = false;
  // Each poll returns its completions in reverse order.
  bool reverse_completions = false;
};
void SetEmulatedFaults(const EmulatedFaults& faults);

// Live emulated objects (contexts, memory regions, completion queues,
// queue pairs) in this process: zero once everything was released.
int EmulatedObjectsAlive();

}  // namespace baton::rdma
