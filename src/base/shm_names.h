// Names of Baton's shared-memory segments (/dev/shm) and their removal.
//
// A rank's segment keeps its name only until every local peer has mapped
// it; with connections made on first use that can be never, and a process
// that dies meanwhile (SIGKILL, a crash, exit without batonCommDestroy)
// cannot remove it. So the name carries the owner's pid, and whoever
// outlives the owner removes it: the owner itself at exit, its surviving
// peers when they learn it failed, its launcher when it died of a signal.
#pragma once

#include <cstdint>
#include <string>

namespace baton {

// The name (for shm_open) of rank `rank`'s segment in communicator
// `comm_id`, made by process `pid` as that process sees its own pid.
std::string ShmSegmentName(uint64_t comm_id, int rank, int32_t pid);

// Unlinks every segment in /dev/shm named for process `pid` and owned by
// this user; returns how many it removed. For a launcher, after `pid`
// exited: in another pid namespace sharing /dev/shm the same number may be
// a live process, so call it only for a process of one's own.
int RemoveShmSegmentsOf(int32_t pid);

// Keeps `name` (a linked segment of this process) on the list that an
// atexit handler unlinks, so that exit() without batonCommDestroy leaves
// nothing behind; ForgetAtExit takes it off once unlinked. A child forked
// after registering does not unlink its parent's names when it exits.
void UnlinkAtExit(const std::string& name);
void ForgetAtExit(const std::string& name);

}  // namespace baton
