// The C API of host streams (comm/stream.h).
#include <baton.h>

#include "api/handles.h"

#pragma GCC visibility push(default)

using namespace baton;  // NOLINT: the C API below is a thin layer over it

extern "C" {

batonResult_t batonStreamCreate(batonStream_t* stream) {
  if (stream == nullptr) return Fail("batonStreamCreate", InvalidArgument("stream is NULL"));
  *stream = RegisterStream();
  return batonSuccess;
}

batonResult_t batonStreamSynchronize(batonStream_t stream) {
  if (stream == nullptr || !StreamIsLive(stream))
    return Fail("batonStreamSynchronize", InvalidArgument("stream is NULL or not live"));
  BATON_API_CHECK("batonStreamSynchronize", stream->impl.Synchronize(), nullptr);
  return batonSuccess;
}

batonResult_t batonStreamQuery(batonStream_t stream) {
  if (stream == nullptr || !StreamIsLive(stream))
    return Fail("batonStreamQuery", InvalidArgument("stream is NULL or not live"));
  return stream->impl.Query();
}

batonResult_t batonStreamDestroy(batonStream_t stream) {
  // The stream drains its queue when the returned owner goes.
  if (!UnregisterStream(stream))
    return Fail("batonStreamDestroy", InvalidArgument("stream is NULL or not live"));
  return batonSuccess;
}

}  // extern "C"

#pragma GCC visibility pop
