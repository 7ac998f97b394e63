// Identity of the host a rank runs on, for choosing shared memory vs network.
#pragma once

#include <cstdint>
#include <string>

namespace baton {

// Two ranks share a host (and so can use shared memory) when hostname, boot
// id and network namespace all agree. Ranks in different network namespaces
// count as different hosts: that is how tests simulate a cluster on one
// machine. `override_id` (BATON_HOSTID), when not empty, replaces all three.
uint64_t HostHash(const std::string& override_id);

// The machine (kernel instance: its boot id) a rank runs on, whatever its
// network namespace or BATON_HOSTID: ranks of simulated hosts on one
// machine share its cores, which matters for waiting and tuning.
uint64_t MachineHash();

// A short description of what went into HostHash, for logs.
std::string HostIdentity(const std::string& override_id);

// 64-bit FNV-1a, used for host identity and derived ids.
uint64_t Fnv1a64(const void* data, size_t len, uint64_t seed = 0xcbf29ce484222325ull);

}  // namespace baton
