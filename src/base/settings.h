// Settings: every BATON_* environment variable, declared once with its type,
// default and one line of documentation, and read in one place.
//
// Contract: nothing outside settings.cc calls getenv for a BATON_* name.
// Code that needs a setting takes it from a Settings snapshot:
//  - ReadSettings() reads all variables now; a communicator takes one
//    snapshot at creation (and batonGetUniqueId / batonCommInitFromEnv one
//    each), so a later communicator sees a changed environment, as in NCCL;
//  - ProcessSettings() is one snapshot taken at first use and kept for the
//    process, for what is configured per process (logging, CPU kernels, the
//    CUDA device path).
// A malformed number is not fatal: the default is used, with a warning.
// README.md's table of variables lists the same names (a test checks it).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace baton {

// X(member, name, type, default, doc). `type` is one of String, Int, Bool,
// Size (bytes, with an optional K/M/G suffix); `default` is a value of it.
#define BATON_SETTINGS(X)                                                                          \
  X(debug, "BATON_DEBUG", String, "",                                                              \
    "log level: WARN, INFO or TRACE; lines start with host:pid:tid [rank] BATON")                  \
  X(debug_subsys, "BATON_DEBUG_SUBSYS", String, "ALL",                                             \
    "subsystems to log: INIT,BOOTSTRAP,SHM,NET,COLL,ENV,TUNING; ^NET excludes; set without "       \
    "BATON_DEBUG it implies INFO")                                                                 \
  X(algo, "BATON_ALGO", String, "",                                                                \
    "algorithms the model may choose, NCCL syntax over ring, rhd, tree, binomial, pairwise, "      \
    "hier, direct (empty: all)")                                                                   \
  X(timeout, "BATON_TIMEOUT", Int, 300, "seconds any wait may last without progress (0: forever)") \
  X(check, "BATON_CHECK", Bool, false,                                                             \
    "before each collective, check that every rank called the same one (an extra small "           \
    "allgather)")                                                                                  \
  X(flight_recorder, "BATON_FLIGHT_RECORDER", Int, 64,                                             \
    "calls each communicator keeps in its flight recorder file in /dev/shm (0: no file)")          \
  X(trace_file, "BATON_TRACE_FILE", String, "",                                                    \
    "write a Chrome trace-event timeline of every call; each rank writes FILE.rankN.json at "      \
    "destroy, batonrun merges them into FILE")                                                     \
  X(trace_events, "BATON_TRACE_EVENTS", Int, 100000,                                               \
    "calls each communicator's timeline holds; later ones are counted as dropped")                 \
  X(trace_list, "BATON_TRACE_LIST", String, "",                                                    \
    "set by batonrun: a file where ranks note the BATON_TRACE_FILE they write, for the merge")     \
  X(transport, "BATON_TRANSPORT", String, "auto",                                                  \
    "auto, shm, tcp or ib (tcp: TCP even on one host; ib: RDMA between hosts or an error; shm: "   \
    "one host or an error)")                                                                       \
  X(ib_hca, "BATON_IB_HCA", String, "",                                                            \
    "RDMA devices, NCCL_IB_HCA syntax (mlx5_0:1,mlx5_1; ^mlx5_0 excludes; =mlx5_0 exact)")         \
  X(ib_gid_index, "BATON_IB_GID_INDEX", Int, -1, "RoCE GID index (-1: a RoCE v2 IPv4 one)")        \
  X(ib_tc, "BATON_IB_TC", Int, 0, "RDMA traffic class (RoCE: DSCP << 2)")                          \
  X(ib_qps_per_peer, "BATON_IB_QPS_PER_PEER", Int, 1, "RDMA queue pairs per peer (1 to 8)")        \
  X(ib_zcopy_min, "BATON_IB_ZCOPY_MIN", Size, 1 << 20,                                             \
    "smallest RDMA message between registered buffers written in place (0: never)")                \
  X(ib_emulate, "BATON_IB_EMULATE", Bool, false,                                                   \
    "for tests only: an emulated RDMA device over shared memory instead of libibverbs")            \
  X(socket_ifname, "BATON_SOCKET_IFNAME", String, "",                                              \
    "interface for bootstrap and TCP, NCCL syntax (eth0, ^docker, =ib0); empty: not lo/docker")    \
  X(runtime_connect, "BATON_RUNTIME_CONNECT", Bool, true,                                          \
    "1: connect each pair of ranks when a call first needs it; 0: every pair at creation")         \
  X(nsocks_perpeer, "BATON_NSOCKS_PERPEER", Int, 1, "TCP sockets per pair of hosts (1 to 16)")     \
  X(buffsize, "BATON_BUFFSIZE", Size, 4 << 20, "bytes per shared-memory ring and TCP staging")     \
  X(shm_stream, "BATON_SHM_STREAM", Int, -1,                                                       \
    "1: copy into shared-memory slots with streaming stores; 0: cached stores; -1: stream to "     \
    "ranks in another package and while a ring measures its lines as slow to cross; calls over "   \
    "8 MiB as measured faster")                                                                    \
  X(chunksize, "BATON_CHUNKSIZE", Size, 0,                                                         \
    "pipelining granularity of the algorithms (0: the cost model chooses per call size)")          \
  X(rhd_switch, "BATON_RHD_SWITCH", Size, 0,                                                       \
    "rhd allreduce: recursive doubling below this many bytes, Rabenseifner from it (0: the "       \
    "model)")                                                                                      \
  X(net_mbps, "BATON_NET_MBPS", Int, 0,                                                            \
    "link rate between hosts the cost model assumes, Mbit/s (0: what the interface reports)")      \
  X(calibrate, "BATON_CALIBRATE", Bool, false,                                                     \
    "measure the cost model's link and reduction figures at communicator creation (cached)")       \
  X(calibration_cache, "BATON_CALIBRATION_CACHE", String, "",                                      \
    "directory of the calibration cache (default: $XDG_CACHE_HOME/baton or ~/.cache/baton)")       \
  X(topo_dump_file, "BATON_TOPO_DUMP_FILE", String, "",                                            \
    "rank 0 writes the topology, cost figures and algorithm table it used here (JSON)")            \
  X(cma, "BATON_CMA", Bool, false, "read large shared-memory messages with process_vm_readv")      \
  X(cma_threshold, "BATON_CMA_THRESHOLD", Size, 256 << 10,                                         \
    "smallest message sent by address when BATON_CMA=1")                                           \
  X(cma_coll, "BATON_CMA_COLL", Int, -1,                                                           \
    "single-copy collectives on ordinary buffers of one host (process_vm_readv/writev): "          \
    "-1 where ranks do not outnumber cores, 1 always, 0 never")                                    \
  X(cma_coll_min_speed, "BATON_CMA_COLL_MIN_SPEED", Int, 60,                                       \
    "BATON_CMA_COLL=-1: single copy only where the kernel's copy runs at >= this % of memcpy")     \
  X(cma_coll_min_bytes, "BATON_CMA_COLL_MIN_BYTES", Size, 1 << 20,                                 \
    "smallest collective on ordinary buffers that takes the single-copy path")                     \
  X(registered_min_bytes, "BATON_REGISTERED_MIN_BYTES", Size, kSizeFromMachine,                    \
    "smallest collective on registered buffers that reads the peers' buffers in place "            \
    "(default 32K, 64K where ranks outnumber cores)")                                              \
  X(copy_in, "BATON_COPY_IN", Int, -1,                                                             \
    "allreduce on ordinary buffers of one host copied into shared stages the peers read: -1 "      \
    "where ranks outnumber cores, 1 always, 0 never")                                              \
  X(copy_in_min_bytes, "BATON_COPY_IN_MIN_BYTES", Size, 16 << 10,                                  \
    "smallest allreduce on ordinary buffers that takes the copy-in path")                          \
  X(copy_in_max_bytes, "BATON_COPY_IN_MAX_BYTES", Size, 0,                                         \
    "largest allreduce on ordinary buffers that takes the copy-in path (0: no limit)")             \
  X(lines_max_bytes, "BATON_LINES_MAX_BYTES", Size, kSizeFromMachine,                              \
    "largest allreduce that ranks all sharing memory read from each other's lines, at most 32K "   \
    "(0: never; default 128K / (ranks - 1) where ranks outnumber cores, else 2K / (ranks - 1))")   \
  X(spin_us, "BATON_SPIN_US", Int, 200,                                                            \
    "microseconds to poll before sleeping on a futex, a socket, a CUDA event or a host stream")    \
  X(spin_yield, "BATON_SPIN_YIELD", Bool, true, "sched_yield while polling")                       \
  X(spin_yield_ns, "BATON_SPIN_YIELD_NS", Int, -1,                                                 \
    "yield at most this often while polling (-1: 1000, or 0 when ranks outnumber cores)")          \
  X(kernels, "BATON_KERNELS", String, "auto",                                                      \
    "CPU reduction kernels: auto, portable or a Highway target (sse4, avx2, avx512, avx3_dl, "     \
    "neon, sve, sve2)")                                                                            \
  X(cuda, "BATON_CUDA", Bool, true, "look for a GPU (0: device buffers are not recognized)")       \
  X(cuda_ipc, "BATON_CUDA_IPC", Bool, true,                                                        \
    "read device buffers of ranks on one host through CUDA IPC (0: stage through host memory)")    \
  X(cuda_ipc_cache, "BATON_CUDA_IPC_CACHE", Int, 64,                                               \
    "peer allocations kept mapped per communicator")                                               \
  X(cuda_stream_wait, "BATON_CUDA_STREAM_WAIT", String, "memop",                                   \
    "how a cudaStream_t waits for a call's host side: memop (cuStreamWaitValue32) or kernel")      \
  X(hostid, "BATON_HOSTID", String, "", "host identity (default: hostname + boot id + netns)")     \
  X(topo_file, "BATON_TOPO_FILE", String, "",                                                      \
    "hwloc XML export to use instead of this machine's topology")                                  \
  X(bind, "BATON_BIND", String, "",                                                                \
    "auto, core, numa or none: how batonrun binds ranks (default auto); the library binds an "     \
    "unbound rank when set")                                                                       \
  X(root, "BATON_ROOT", String, "",                                                                \
    "host:port of the rendezvous for launchers without a unique id")                               \
  X(secret, "BATON_SECRET", String, "", "shared secret for BATON_ROOT jobs (default: derived)")    \
  X(unique_id, "BATON_UNIQUE_ID", String, "", "the unique id as 256 hex digits (set by batonrun)") \
  X(rank, "BATON_RANK", String, "", "global rank (set by batonrun)")                               \
  X(world_size, "BATON_WORLD_SIZE", String, "", "number of ranks (set by batonrun)")               \
  X(elastic_dir, "BATON_ELASTIC_DIR", String, "",                                                  \
    "set by batonrun --elastic: a private directory where a replacement rank asks an existing "    \
    "rank for its batonCommGrow id")                                                               \
  X(elastic_join, "BATON_ELASTIC_JOIN", Bool, false,                                               \
    "set by batonrun --replace for a replacement rank: it joins the running job with "             \
    "batonCommGrow, not batonCommInitFromEnv")                                                     \
  X(local_rank, "BATON_LOCAL_RANK", String, "",                                                    \
    "rank on this host (set by batonrun; read when BATON_BIND asks the library to bind)")          \
  X(local_size, "BATON_LOCAL_SIZE", String, "",                                                    \
    "ranks on this host (set by batonrun; read when BATON_BIND asks the library to bind)")

// The default of a Size setting that the communicator decides from the
// machine (its doc line says how); a value the user sets replaces it.
inline constexpr uint64_t kSizeFromMachine = UINT64_MAX;

// One value of every setting.
struct Settings {
#define BATON_SETTING_MEMBER(member, name, type, default_value, doc) \
  SettingType##type member = default_value;
  using SettingTypeString = std::string;
  using SettingTypeInt = int64_t;
  using SettingTypeBool = bool;
  using SettingTypeSize = uint64_t;
  BATON_SETTINGS(BATON_SETTING_MEMBER)
#undef BATON_SETTING_MEMBER
};

// The name of each variable as a constant, for code that sets or mentions
// one (batonrun): SettingName::rank is "BATON_RANK".
struct SettingName {
#define BATON_SETTING_NAME(member, name, type, default_value, doc) \
  static constexpr const char* member = name;
  BATON_SETTINGS(BATON_SETTING_NAME)
#undef BATON_SETTING_NAME
};

// What the table says about one variable.
struct SettingInfo {
  const char* name;
  const char* type;           // "String", "Int", "Bool" or "Size"
  const char* default_value;  // as written in the table
  const char* doc;
};

// Every variable, in table order.
std::span<const SettingInfo> AllSettings();

// Reads every variable now. With `log`, each number that is set is reported
// at INFO and each malformed one at WARN (the default is used instead).
Settings ReadSettings(bool log = true);

// One snapshot for the whole process, taken silently at first use.
const Settings& ProcessSettings();

// BATON_TIMEOUT in seconds, with 0 (or less) meaning "wait forever" turned
// into kForeverSeconds (base/deadline.h), so every wait computes its
// deadline alike: bootstrap, executor, CUDA streams.
double TimeoutSeconds(const Settings& settings);

// A variable that another program sets (OMPI_COMM_WORLD_RANK, SLURM_JOB_ID,
// MASTER_ADDR): its value, or nullopt when unset or empty. Not for BATON_*.
std::optional<std::string> ForeignVariable(const char* name);

// Parses "123", "4K", "2M", "1G" (powers of 1024). False on malformed input.
bool ParseSize(const std::string& text, uint64_t* out);
// Parses a whole decimal (or 0x hex) integer. False on malformed input.
bool ParseInt(const std::string& text, int64_t* out);

}  // namespace baton
