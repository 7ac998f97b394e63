#include "bootstrap/unique_id.h"

#include <cstring>

namespace baton {

Status DecodeUniqueId(const batonUniqueId& id, UniqueIdData* out) {
  memcpy(out, id.internal, sizeof(*out));
  if (out->magic != kUniqueIdMagic || out->version != kBootstrapVersion)
    return InvalidArgument("not a unique id made by batonGetUniqueId of this Baton version");
  return Status::Ok();
}

batonUniqueId EncodeUniqueId(const UniqueIdData& data) {
  batonUniqueId id;
  memset(&id, 0, sizeof(id));
  memcpy(id.internal, &data, sizeof(data));
  return id;
}

}  // namespace baton
