/*
 * Baton: collective communication for host and CUDA buffers.
 *
 * The API mirrors NCCL's: same names with the "baton" prefix, same argument
 * order, same in-place conventions. A program written against nccl.h ports
 * by renaming. Every function returns a batonResult_t; on failure a
 * human-readable reason is available from batonGetLastError().
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef BATON_H_
#define BATON_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BATON_MAJOR 0
#define BATON_MINOR 1
#define BATON_PATCH 0
/* Encoded as in NCCL >= 2.9: major * 10000 + minor * 100 + patch. */
#define BATON_VERSION_CODE (BATON_MAJOR * 10000 + BATON_MINOR * 100 + BATON_PATCH)

/* Opaque communicator handle. */
typedef struct batonComm* batonComm_t;
/* Opaque stream handle: a host stream from batonStreamCreate, or (CUDA builds)
 * a cudaStream_t cast to batonStream_t. NULL runs the call synchronously. */
typedef struct batonStream* batonStream_t;
/* Opaque host-stream event handle (batonEventCreate). */
typedef struct batonEvent* batonEvent_t;

#define BATON_UNIQUE_ID_BYTES 128
/* Rendezvous address and secret of a communicator being created. Produced by
 * batonGetUniqueId on one process and distributed to all ranks by the user. */
typedef struct {
  char internal[BATON_UNIQUE_ID_BYTES];
} batonUniqueId;

typedef enum {
  batonSuccess = 0,
  batonUnhandledCudaError = 1,
  batonSystemError = 2,
  batonInternalError = 3,
  batonInvalidArgument = 4,
  batonInvalidUsage = 5,
  batonRemoteError = 6,
  batonInProgress = 7,
  batonTimeout = 8,
  batonNumResults = 9
} batonResult_t;

/* batonFloat8e4m3 and batonFloat8e5m2 are the OCP 8-bit floats (CUDA's
 * __nv_fp8_e4m3 and __nv_fp8_e5m2, NCCL's ncclFloat8e4m3/e5m2 with the same
 * values). Reductions on fp16, bf16 and fp8 accumulate in fp32 within each
 * step and round to nearest even once when storing; fp8 results saturate:
 * a value past the largest finite one, infinities included, becomes
 * +-448 (e4m3) or +-57344 (e5m2), as CUDA's __NV_SATFINITE conversion that
 * NCCL uses. A partial result sent to another rank is stored, and so
 * rounded, in the datatype. */
typedef enum {
  batonInt8 = 0,
  batonChar = 0,
  batonUint8 = 1,
  batonInt32 = 2,
  batonInt = 2,
  batonUint32 = 3,
  batonInt64 = 4,
  batonUint64 = 5,
  batonFloat16 = 6,
  batonHalf = 6,
  batonFloat32 = 7,
  batonFloat = 7,
  batonFloat64 = 8,
  batonDouble = 8,
  batonBfloat16 = 9,
  batonFloat8e4m3 = 10,
  batonFloat8e5m2 = 11,
  batonNumTypes = 12
} batonDataType_t;

/* batonAvg on integer types is the sum followed by C integer division.
 * Ops from batonRedOpCreatePreMulSum take values from batonNumOps up to
 * batonMaxRedOp (which only fixes the enum's range, as in NCCL). */
typedef enum {
  batonSum = 0,
  batonProd = 1,
  batonMax = 2,
  batonMin = 3,
  batonAvg = 4,
  batonNumOps = 5,
  batonMaxRedOp = 0x7fffffff
} batonRedOp_t;

/* Where the scalar of a PreMulSum op lives (NCCL's ncclScalarResidence_t). */
typedef enum {
  /* A pointer to device memory (or, without a GPU, to host memory), read
   * when each call using the op runs, so it may change between calls. */
  batonScalarDevice = 0,
  /* A pointer to host memory, read once by batonRedOpCreatePreMulSum. */
  batonScalarHostImmediate = 1
} batonScalarResidence_t;

/* Color for batonCommSplit: the rank takes part in no new communicator. */
#define BATON_SPLIT_NOCOLOR (-1)

/* ---- Library and communicator ---------------------------------------- */

batonResult_t batonGetVersion(int* version);

/* Opens a rendezvous listener in this process and fills *uniqueId with its
 * address and a random secret. The process must stay alive until every rank
 * has joined; it may fork the ranks itself. */
batonResult_t batonGetUniqueId(batonUniqueId* uniqueId);

/* Collective over nranks processes: each calls it with the same id and a
 * distinct rank in [0, nranks). Blocks until all have joined or BATON_TIMEOUT. */
batonResult_t batonCommInitRank(batonComm_t* comm, int nranks, batonUniqueId commId, int rank);

/* Like batonCommInitRank with rank, size and rendezvous taken from the
 * environment of batonrun, mpirun (Open MPI), PMI, srun (Slurm) or torchrun.
 * See README.md for the variables. */
batonResult_t batonCommInitFromEnv(batonComm_t* comm);

/* Configuration of a new communicator, as NCCL's ncclConfig_t: start from
 * BATON_CONFIG_INITIALIZER and set the fields you want; a field left
 * undefined takes its default (the BATON_* variable where there is one).
 * size/magic/version let later versions append fields: the library reads
 * only the first `size` bytes, so a program built against this header keeps
 * working with a newer library. */
#define BATON_CONFIG_UNDEF_INT (-2147483647 - 1)
#define BATON_CONFIG_UNDEF_PTR NULL
#define BATON_CONFIG_MAGIC 0xba7c0f19u
typedef struct batonConfig {
  size_t size;          /* sizeof(batonConfig_t) */
  unsigned int magic;   /* BATON_CONFIG_MAGIC */
  unsigned int version; /* BATON_VERSION_CODE of the header the caller built against */
  /* 1 (default): creation returns when the communicator is ready. 0: it
   * returns batonInProgress at once with a valid handle, and completes in
   * the background; poll batonCommGetAsyncError until it is no longer
   * batonInProgress before any other call on the handle (abort and destroy
   * may come at any time). Applies to init, split and shrink. */
  int blocking;
  /* A name for logs, errors and the flight recorder (copied; NULL: none). */
  const char* commName;
  /* Seconds any wait of this communicator may take, creation included;
   * 0: forever. Undefined: BATON_TIMEOUT. */
  int timeout;
  /* Accepted for NCCL compatibility (0 or 1): a Baton child communicator
   * never shares its parent's connections. */
  int splitShare;
} batonConfig_t;

#define BATON_CONFIG_INITIALIZER                                                           \
  {                                                                                        \
    sizeof(batonConfig_t), BATON_CONFIG_MAGIC, BATON_VERSION_CODE, BATON_CONFIG_UNDEF_INT, \
        BATON_CONFIG_UNDEF_PTR, BATON_CONFIG_UNDEF_INT, BATON_CONFIG_UNDEF_INT             \
  }

/* batonCommInitRank with a configuration (NULL: the defaults). */
batonResult_t batonCommInitRankConfig(batonComm_t* comm, int nranks, batonUniqueId commId, int rank,
                                      batonConfig_t* config);

/* ndev ranks of one new communicator in this process, one per entry of
 * comms; each is then used from its own thread (a collective blocks until
 * every rank has called it). devlist names the CUDA device of each rank
 * (NULL: 0 .. ndev-1); a host-only build accepts any non-negative ids. */
batonResult_t batonCommInitAll(batonComm_t* comms, int ndev, const int* devlist);

/* Collective over comm: ranks passing the same color form a new
 * communicator, ordered by key then by parent rank. BATON_SPLIT_NOCOLOR
 * yields *newcomm == NULL. config: NULL inherits the parent's name and
 * timeout and blocks. */
batonResult_t batonCommSplit(batonComm_t comm, int color, int key, batonComm_t* newcomm,
                             batonConfig_t* config);

/* batonCommShrink's flags. DEFAULT: the communicator is healthy and nothing
 * is in flight on it. ABORT: stop what is in flight first (after a failure);
 * the parent is then failed and only good for batonCommAbort/Destroy. */
#define BATON_SHRINK_DEFAULT 0
#define BATON_SHRINK_ABORT 1

/* Called by every rank of comm that is not in excludeRanksList (distinct
 * ranks of comm; dead ones, typically): they form a new communicator without
 * the excluded ranks, numbered in their order in comm. config as for split.
 * As ncclCommShrink (NCCL 2.27). */
batonResult_t batonCommShrink(batonComm_t comm, int* excludeRanksList, int excludeRanksCount,
                              batonComm_t* newcomm, batonConfig_t* config, int shrinkFlags);

/* Makes the unique id that ranks joining comm through batonCommGrow use, as
 * ncclCommGetUniqueId (NCCL 2.29). Called by one rank of comm (the grow's
 * coordinator), which hands the id to the joining ranks out of band (a
 * file, a socket, batonrun's BATON_ELASTIC_DIR; docs/reliability.md) and
 * passes it to its own batonCommGrow. This process serves the id's
 * rendezvous for comm's timeout: the grow must complete within it. One id
 * at a time: batonInvalidUsage while the previous one has not been passed
 * to a batonCommGrow, which uses it up (whatever the grow's outcome).
 * batonInvalidArgument for a NULL uniqueId or a comm that is not live. */
batonResult_t batonCommGetUniqueId(batonComm_t comm, batonUniqueId* uniqueId);

/* Makes a communicator of nRanks ranks from comm's ranks and ranks that join
 * it, as ncclCommGrow (NCCL 2.29). Collective over comm and the joining
 * ranks, none of them inside a group:
 *  - the coordinator (comm's rank that called batonCommGetUniqueId): comm,
 *    uniqueId = that id, rank = -1;
 *  - comm's other ranks: comm, uniqueId = NULL (or the same id), rank = -1;
 *  - each joining rank: comm = NULL, uniqueId = the id, rank = its rank.
 * comm's ranks keep their numbers; the joining ranks take the numbers from
 * comm's size to nRanks - 1, each a distinct one (two with one number fail
 * the rendezvous on every rank). Nothing may be in flight on comm, which
 * stays usable, and is destroyed by the caller when no longer needed.
 * config: NULL gives comm's ranks comm's name and timeout, and joining
 * ranks the defaults; blocking = 0 returns batonInProgress at once, as for
 * batonCommInitRankConfig. comm's ranks check together that exactly one of
 * them passes the id it made and that all pass the same nRanks
 * (batonInvalidUsage on every one of them otherwise); a joining rank that
 * does not come, or comm's ranks that do not, make the others fail with
 * batonTimeout within the timeout. batonInvalidArgument: newcomm NULL, comm
 * and uniqueId both NULL, nRanks not larger than comm's size, rank other
 * than -1 with comm, or outside [0, nRanks) without. */
batonResult_t batonCommGrow(batonComm_t comm, int nRanks, const batonUniqueId* uniqueId, int rank,
                            batonComm_t* newcomm, batonConfig_t* config);

/* Waits for the work queued on comm (host streams) and returns the first
 * error among it, or the communicator's sticky error; the communicator stays
 * usable for queries and must still be destroyed. As ncclCommFinalize. */
batonResult_t batonCommFinalize(batonComm_t comm);
/* Waits for queued work, then frees the communicator. Finalize and Destroy
 * inside a group (batonGroupStart) that holds calls on comm are
 * batonInvalidUsage: those calls run at batonGroupEnd. */
batonResult_t batonCommDestroy(batonComm_t comm);
/* Stops outstanding work at once (peers see an error), then frees; calls on
 * comm queued in an open group fail at batonGroupEnd. */
batonResult_t batonCommAbort(batonComm_t comm);
/* The timeout of the calls made on comm after this returns, in seconds
 * without progress (0: forever; BATON_CONFIG_UNDEF_INT: comm's own, from its
 * creation, again). Each call takes the value when it is made, so a call
 * queued on a stream keeps its own; the calls merged by a group run under
 * the shortest of theirs. It bounds the call alone, not creation, split or
 * the communicator's other waits. A call past its timeout fails as one past
 * comm's does: batonTimeout naming the ranks that never came, and comm is
 * failed (later calls fail, the peers are told; shrink or abort it). For
 * bindings whose operations take their own timeout (torch's per-operation
 * options); calls on one communicator are ordered, so set it from the thread
 * that makes them. batonInvalidArgument for a comm that is not live or a
 * negative timeout. */
batonResult_t batonCommSetCallTimeout(batonComm_t comm, int timeout);
/* batonSuccess, batonInProgress while a nonblocking creation runs, or the
 * sticky error of a failed creation or asynchronous operation. */
batonResult_t batonCommGetAsyncError(batonComm_t comm, batonResult_t* asyncError);
/* The ranks of comm that this rank knows to have failed, in comm's
 * numbering, ascending, each once: up to maxRanks of them into ranks, and
 * their number into *nFailed (0 when none; the whole number even when it is
 * larger than maxRanks; ranks may be NULL when maxRanks is 0, to ask for the
 * number alone). As MPI's MPI_Comm_get_failed (ULFM), the list is what this
 * rank knows, and it only grows. A rank has failed when it is gone without
 * freeing comm on purpose: its process died or exited, its connection is
 * refused, it stopped answering past BATON_TIMEOUT (named in the timeout's
 * error), or it aborted comm before comm had failed. A rank that failed a
 * call because of another's failure, shrank, or aborted or destroyed comm
 * after the failure is a survivor and is never listed; a rank that
 * destroyed comm (not aborted) is not listed either. On a comm that has
 * failed the call first asks the control sockets and the listeners of the
 * ranks this one never talked to, for at most min(1 s, comm's timeout), so
 * that every survivor lists every rank whose process is gone by then: pass
 * the list to batonCommShrink (ranks killed together exit some
 * milliseconds apart: read it until it stops growing). A rank never
 * connected to this one that has freed comm cannot be told from a dead one:
 * ask before the survivors free the failed comm. Works on a failed comm, is
 * safe to call from any thread, and does not change comm.
 * batonInvalidArgument for a comm that is not live, a NULL nFailed, a
 * negative maxRanks, or a NULL ranks with maxRanks > 0; batonInvalidUsage
 * while a nonblocking creation of comm runs. See docs/reliability.md,
 * "Which ranks failed". */
batonResult_t batonCommGetFailedRanks(batonComm_t comm, int* ranks, int maxRanks, int* nFailed);
batonResult_t batonCommCount(const batonComm_t comm, int* count);
batonResult_t batonCommUserRank(const batonComm_t comm, int* rank);

const char* batonGetErrorString(batonResult_t result);
/* The message of the last failure seen on comm (or in this thread, when comm
 * is NULL or invalid). Never NULL; "" when there was none. The text belongs
 * to the calling thread and stays valid until a later call of this thread
 * asks about the same comm after its error changed, so two results (two
 * comms, or a comm and NULL) can be printed side by side. */
const char* batonGetLastError(batonComm_t comm);

/* ---- User reduction ops -------------------------------------------------- */

/* Creates a reduction op for comm that sums the inputs after multiplying
 * each rank's input by *scalar (one element of datatype; each rank may pass
 * its own): the result is the sum over ranks r of (scalar_r * x_r), every
 * product rounded once to datatype (integers wrap), then summed as batonSum
 * does. The op is valid only on comm, with datatype, for batonAllReduce,
 * batonReduce and batonReduceScatter; every rank of a call must pass a
 * PreMulSum op (checked with the call's other arguments). Handles are
 * unique in the process, so a destroyed op or one made on another
 * communicator gives batonInvalidArgument. As ncclRedOpCreatePreMulSum. */
batonResult_t batonRedOpCreatePreMulSum(batonRedOp_t* op, void* scalar, batonDataType_t datatype,
                                        batonScalarResidence_t residence, batonComm_t comm);
/* Frees op; calls already made with it (queued on streams too) are not
 * affected. batonInvalidArgument for a built-in op or one not live on comm. */
batonResult_t batonRedOpDestroy(batonRedOp_t op, batonComm_t comm);

/* ---- Registered buffers ---------------------------------------------- */

/* Allocates size bytes (size > 0) of zeroed host memory that the other
 * processes of this host can map (a memfd mapped MAP_SHARED), as
 * ncclMemAlloc. Collectives on buffers inside such memory, registered with
 * batonCommRegister by every rank of the call, read the peers' buffers in
 * place (see batonCommRegister). batonInvalidArgument for a NULL ptr or a
 * zero size, batonSystemError when the memory cannot be had. */
batonResult_t batonMemAlloc(void** ptr, size_t size);
/* Frees memory from batonMemAlloc. batonInvalidArgument for any other
 * pointer (NULL, freed already, or inside an allocation rather than its
 * start) and for memory still registered on a live communicator
 * (batonCommDeregister or batonCommDestroy first). */
batonResult_t batonMemFree(void* ptr);
/* Registers buff[0, size) on comm and returns a handle for
 * batonCommDeregister, as ncclCommRegister (same argument order). Local:
 * each rank registers on its own, not collectively. A collective
 * (allreduce, reduce-scatter, allgather, broadcast, reduce; not alltoall,
 * PreMulSum or calls in a group) whose send and receive buffers are
 * registered on every rank, all ranks on one host sharing memory, buffers
 * inside batonMemAlloc memory, at least BATON_REGISTERED_MIN_BYTES (32 KiB;
 * 64 KiB where a host runs more ranks than cores) in all, and whose
 * algorithm BATON_ALGO leaves to Baton, runs without the transports: each
 * rank reduces or copies straight from its peers' buffers into its own
 * output, one pass through memory (allreduce sums in rank order, the same
 * bits however a vector is cut into calls). Ranks agree per call;
 * when any rank's buffers are not registered, the call takes the ordinary
 * path with the same result. Memory not from batonMemAlloc is accepted and
 * gets a handle, but peers cannot map it, so calls on it take the ordinary
 * path (logged once at INFO). A registered buffer must stay allocated until
 * it is deregistered or comm is destroyed. batonInvalidArgument for a NULL
 * buff or handle, or a zero size. */
batonResult_t batonCommRegister(batonComm_t comm, void* buff, size_t size, void** handle);
/* Gives a handle from batonCommRegister on comm back. batonInvalidArgument
 * for a handle that is not registered on comm (deregistered already, or
 * another communicator's). */
batonResult_t batonCommDeregister(batonComm_t comm, void* handle);

/* ---- Host streams ------------------------------------------------------ */

/* A host stream runs the calls queued on it in order, asynchronously to the
 * caller, so communication can overlap computation. Like CUDA's launch queue
 * it holds a bounded number of calls (1024): a caller that queues that many
 * ahead of the stream waits inside the call until half of them have run. */
batonResult_t batonStreamCreate(batonStream_t* stream);
/* Waits for every call queued so far; returns the first error among them. */
batonResult_t batonStreamSynchronize(batonStream_t stream);
/* batonSuccess when idle, batonInProgress while work is queued, or an error. */
batonResult_t batonStreamQuery(batonStream_t stream);
/* Waits for queued work, then frees the stream. */
batonResult_t batonStreamDestroy(batonStream_t stream);

/* Host-stream events, as cudaEvent: an event recorded on a host stream
 * completes when the calls queued on that stream before the record have
 * run, and reports their outcome, so each of several calls in flight on
 * one stream can be waited for on its own.
 *
 * Errors: an event reports the first error among the calls queued on its
 * stream after the stream's previous record (of any event) and before its
 * own; a call that failed earlier is reported by the event recorded after
 * it, not by later ones (their calls fail on their own when the
 * communicator is broken, with its sticky error). batonStreamSynchronize
 * and batonStreamQuery still report every error since the last
 * synchronize; events neither clear nor are cleared by it.
 *
 * Bad arguments (a NULL pointer, an event not created or destroyed, a
 * stream that is not a live host stream: a CUDA stream has cudaEvents)
 * give batonInvalidArgument with a message in batonGetLastError(NULL). */
batonResult_t batonEventCreate(batonEvent_t* event);
/* Captures the calls queued on stream so far; a later record moves the
 * event to the new point (queries and waits made after it see that one).
 * stream NULL completes the event at once with batonSuccess: calls on the
 * NULL stream have finished when they return. */
batonResult_t batonEventRecord(batonEvent_t event, batonStream_t stream);
/* batonSuccess when the captured calls have run without error (also for
 * an event never recorded), batonInProgress while they have not, or the
 * error of the first that failed. Never blocks. */
batonResult_t batonEventQuery(batonEvent_t event);
/* Waits for the captured calls and returns what batonEventQuery then
 * would; the message of an error is in batonGetLastError(NULL). The wait
 * ends as the calls do: each within its communicator's timeout, or at
 * batonCommAbort. */
batonResult_t batonEventSynchronize(batonEvent_t event);
/* Frees the event at once; work it captured goes on unaffected. */
batonResult_t batonEventDestroy(batonEvent_t event);
/* Calls queued on stream after this one start only when event's captured
 * calls have run (whatever their outcome; the event reports that), without
 * blocking the caller. The point is the one recorded when this is called.
 * stream must be a live host stream. */
batonResult_t batonStreamWaitEvent(batonStream_t stream, batonEvent_t event);

/* ---- Collectives ------------------------------------------------------- */

batonResult_t batonAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                             batonDataType_t datatype, batonRedOp_t op, batonComm_t comm,
                             batonStream_t stream);
batonResult_t batonBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                             batonDataType_t datatype, int root, batonComm_t comm,
                             batonStream_t stream);
batonResult_t batonReduce(const void* sendbuff, void* recvbuff, size_t count,
                          batonDataType_t datatype, batonRedOp_t op, int root, batonComm_t comm,
                          batonStream_t stream);
/* In place when sendbuff == recvbuff + rank * sendcount * size(datatype). */
batonResult_t batonAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                             batonDataType_t datatype, batonComm_t comm, batonStream_t stream);
/* In place when recvbuff == sendbuff + rank * recvcount * size(datatype). */
batonResult_t batonReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                 batonDataType_t datatype, batonRedOp_t op, batonComm_t comm,
                                 batonStream_t stream);
batonResult_t batonAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                            batonDataType_t datatype, batonComm_t comm, batonStream_t stream);

/* As NCCL 2.28's ncclGather: every rank sends count elements; the root's
 * recvbuff receives nranks * count, rank r's block at r * count. recvbuff
 * matters (and may be NULL elsewhere) only at the root. In place when, at
 * the root, sendbuff == recvbuff + root * count * size(datatype). */
batonResult_t batonGather(const void* sendbuff, void* recvbuff, size_t count,
                          batonDataType_t datatype, int root, batonComm_t comm,
                          batonStream_t stream);
/* As ncclScatter: the root's sendbuff holds nranks * count elements; rank r
 * receives the block at r * count into its recvbuff (count elements).
 * sendbuff matters (and may be NULL elsewhere) only at the root. In place
 * when, at the root, recvbuff == sendbuff + root * count * size(datatype). */
batonResult_t batonScatter(const void* sendbuff, void* recvbuff, size_t count,
                           batonDataType_t datatype, int root, batonComm_t comm,
                           batonStream_t stream);

/* Variable counts, in elements, MPI's layout. Zero counts are allowed, for
 * any rank or all. Every array holds nranks entries and may be freed as soon
 * as the call returns (also on a stream or inside a group). A NULL array,
 * blocks that end past the address space or receive blocks that overlap
 * give batonInvalidArgument. */

/* Rank r's sendcount elements land at displs[r] of every rank's recvbuff.
 * recvcounts and displs are the same on every rank (displs may differ: they
 * only place the blocks in this rank's buffer), and sendcount must equal
 * recvcounts[rank]; ranks whose recvcounts differ fail with
 * batonInvalidUsage naming both calls. In place when sendbuff == recvbuff +
 * displs[rank] * size(datatype). */
batonResult_t batonAllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff,
                              const size_t* recvcounts, const size_t* displs,
                              batonDataType_t datatype, batonComm_t comm, batonStream_t stream);
/* sendbuff holds the blocks of all ranks back to back in rank order,
 * recvcounts[r] elements for rank r; rank r's recvbuff receives the
 * reduction of everyone's block r. recvcounts is the same on every rank. In
 * place when recvbuff == sendbuff + (recvcounts[0] + ... +
 * recvcounts[rank-1]) * size(datatype). */
batonResult_t batonReduceScatterV(const void* sendbuff, void* recvbuff, const size_t* recvcounts,
                                  batonDataType_t datatype, batonRedOp_t op, batonComm_t comm,
                                  batonStream_t stream);
/* This rank sends sendcounts[j] elements at sdispls[j] of sendbuff to rank j
 * and receives recvcounts[i] elements from rank i at rdispls[i] of recvbuff.
 * sendcounts[j] on rank i must equal recvcounts[i] on rank j (sendcounts[rank]
 * == recvcounts[rank] is checked at once; a pair that disagrees otherwise is
 * reported where the bytes arrive). Send blocks may overlap; in place when
 * sendbuff == recvbuff (the outgoing blocks are saved first). */
batonResult_t batonAlltoAllV(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                             void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                             batonDataType_t datatype, batonComm_t comm, batonStream_t stream);
batonResult_t batonSend(const void* sendbuff, size_t count, batonDataType_t datatype, int peer,
                        batonComm_t comm, batonStream_t stream);
batonResult_t batonRecv(void* recvbuff, size_t count, batonDataType_t datatype, int peer,
                        batonComm_t comm, batonStream_t stream);
/* Receives count elements from whichever rank's send reaches this rank
 * first, as MPI_Recv with MPI_ANY_SOURCE; *source is written with that
 * rank when the receive has completed (on a host stream: when the call has
 * run; untouched when it fails). The sender calls an ordinary batonSend:
 * nothing extra travels with sends. Matching:
 *  - from each peer, messages are matched in that peer's send order, and an
 *    any-source receive takes the peer's next send to this rank; named
 *    batonRecv calls and collectives may be interleaved freely;
 *  - when several peers' sends are ready, the first in rank order after
 *    the source of this rank's previous any-source receive wins (round
 *    robin), so no ready peer is passed over twice in a row;
 *  - a peer whose next message to this rank belongs to a collective is not
 *    a match (that collective is ahead of this rank).
 * The matched send must have the same count and datatype:
 * batonInvalidUsage naming both sizes otherwise, on this rank and the
 * sender. The wait has comm's timeout (batonTimeout); a peer that dies or
 * aborts, or batonCommAbort, ends it with an error; like any failed call,
 * these leave comm failed. batonInvalidArgument: count 0 (an empty send
 * carries no message; receive it with batonRecv), NULL source or recvbuff.
 * batonInvalidUsage: inside batonGroupStart/batonGroupEnd (the peer is
 * known only once a send arrives), a communicator of one rank, a CUDA
 * stream, or an RDMA connection (which cannot look ahead). Host buffers
 * only. */
batonResult_t batonRecvAny(void* recvbuff, size_t count, batonDataType_t datatype, int* source,
                           batonComm_t comm, batonStream_t stream);
batonResult_t batonBarrier(batonComm_t comm, batonStream_t stream);

/* Calls between batonGroupStart and batonGroupEnd (per thread, nestable) are
 * queued and launched together at the outermost batonGroupEnd, so any pattern
 * of batonSend/batonRecv completes without deadlock. */
batonResult_t batonGroupStart(void);
batonResult_t batonGroupEnd(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BATON_H_ */
