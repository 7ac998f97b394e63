// The C API of host streams and their events (comm/stream.h).
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

batonResult_t batonEventCreate(batonEvent_t* event) {
  if (event == nullptr) return Fail("batonEventCreate", InvalidArgument("event is NULL"));
  *event = RegisterEvent();
  return batonSuccess;
}

batonResult_t batonEventRecord(batonEvent_t event, batonStream_t stream) {
  std::shared_ptr<StreamMark> unused;
  if (!LookupEventMark(event, &unused))
    return Fail("batonEventRecord", InvalidArgument("event is NULL or not live"));
  if (stream != nullptr && !StreamIsLive(stream)) {
    return Fail(
        "batonEventRecord",
        InvalidArgument("stream is not a live host stream (a CUDA stream takes cudaEvents)"));
  }
  std::shared_ptr<StreamMark> mark = stream ? stream->impl.Mark() : StreamMark::Done();
  // Destroyed meanwhile by another thread: the mark completes unwatched.
  if (!SetEventMark(event, std::move(mark)))
    return Fail("batonEventRecord", InvalidArgument("event was destroyed during the record"));
  return batonSuccess;
}

batonResult_t batonEventQuery(batonEvent_t event) {
  std::shared_ptr<StreamMark> mark;
  if (!LookupEventMark(event, &mark))
    return Fail("batonEventQuery", InvalidArgument("event is NULL or not live"));
  return mark->Query();
}

batonResult_t batonEventSynchronize(batonEvent_t event) {
  std::shared_ptr<StreamMark> mark;
  if (!LookupEventMark(event, &mark))
    return Fail("batonEventSynchronize", InvalidArgument("event is NULL or not live"));
  BATON_API_CHECK("batonEventSynchronize", mark->Wait(), nullptr);
  return batonSuccess;
}

batonResult_t batonEventDestroy(batonEvent_t event) {
  if (!UnregisterEvent(event))
    return Fail("batonEventDestroy", InvalidArgument("event is NULL or not live"));
  return batonSuccess;
}

batonResult_t batonStreamWaitEvent(batonStream_t stream, batonEvent_t event) {
  std::shared_ptr<StreamMark> mark;
  if (!LookupEventMark(event, &mark))
    return Fail("batonStreamWaitEvent", InvalidArgument("event is NULL or not live"));
  if (stream == nullptr || !StreamIsLive(stream)) {
    return Fail("batonStreamWaitEvent",
                InvalidArgument("stream is NULL or not a live host stream"));
  }
  if (mark->Query() == batonInProgress) {
    // The waited-for outcome belongs to the event, not to this stream.
    stream->impl.Enqueue([mark] {
      (void)mark->Wait();
      return Status::Ok();
    });
  }
  return batonSuccess;
}

}  // extern "C"

#pragma GCC visibility pop
