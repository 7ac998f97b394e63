// Affinity of Baton's own threads. A launcher that binds each rank to one
// core (batonrun's automatic binding where ranks <= cores) confines a rank's
// helper threads to that core too, beside a caller that may spin there: a
// CUDA application's thread polling its stream (nccl-tests' loop,
// cudaStreamSynchronize's default spin). A helper thread the caller waits
// for, such as a communicator's device worker, then runs only when the
// scheduler preempts the caller.
#pragma once

#include <string>
#include <vector>

namespace baton {

// Parses a kernel CPU (or node) list ("0-3,8,10-11") into numbers; false
// on malformed or empty text.
bool ParseCpuList(const std::string& text, std::vector<int>* cpus);

// When the calling thread may run on one CPU only, widens its affinity to
// the CPUs of that CPU's NUMA node (sysfs; every online CPU where sysfs has
// no node), as the kernel's cpuset allows. Returns a line for the log
// describing what it did, or "" when it left the affinity alone.
std::string WidenSingleCpuAffinity();

}  // namespace baton
