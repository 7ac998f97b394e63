#include "base/datatype.h"

namespace baton {

size_t DatatypeSize(batonDataType_t dt) {
  switch (dt) {
    case batonInt8:
    case batonUint8:
    case batonFloat8e4m3:
    case batonFloat8e5m2:
      return 1;
    case batonFloat16:
    case batonBfloat16:
      return 2;
    case batonInt32:
    case batonUint32:
    case batonFloat32:
      return 4;
    case batonInt64:
    case batonUint64:
    case batonFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* DatatypeName(batonDataType_t dt) {
  switch (dt) {
    case batonInt8:
      return "int8";
    case batonUint8:
      return "uint8";
    case batonInt32:
      return "int32";
    case batonUint32:
      return "uint32";
    case batonInt64:
      return "int64";
    case batonUint64:
      return "uint64";
    case batonFloat16:
      return "half";
    case batonFloat32:
      return "float";
    case batonFloat64:
      return "double";
    case batonBfloat16:
      return "bfloat16";
    case batonFloat8e4m3:
      return "f8e4m3";
    case batonFloat8e5m2:
      return "f8e5m2";
    default:
      return "invalid";
  }
}

const char* RedOpName(batonRedOp_t op) {
  switch (op) {
    case batonSum:
      return "sum";
    case batonProd:
      return "prod";
    case batonMax:
      return "max";
    case batonMin:
      return "min";
    case batonAvg:
      return "avg";
    default:
      // Every user op is a PreMulSum (batonRedOpCreatePreMulSum).
      return static_cast<int>(op) >= batonNumOps ? "premulsum" : "invalid";
  }
}

}  // namespace baton
