// The compiler's own IEEE binary16 type, the independent reference the fp16
// kernels and collectives are checked against: _Float16 on x86-64 (libgcc
// soft-float or F16C); on Arm __fp16, since g++ 12 has no _Float16 in C++
// there. Both round to nearest even, straight from double (FCVT Hd, Dn on
// aarch64), and quiet NaNs keeping their top payload bits.
#pragma once

namespace baton_test {

#if defined(__ARM_FP16_FORMAT_IEEE)
using Half = __fp16;
#else
using Half = _Float16;
#endif

}  // namespace baton_test
