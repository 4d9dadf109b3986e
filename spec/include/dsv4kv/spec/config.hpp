/// \file config.hpp
/// \brief Host/device qualifiers shared by every spec header.
#pragma once

#if defined(__CUDACC__)
/// Marks a function callable from host and device code.
#define DSV4KV_HD __host__ __device__ __forceinline__
#else
#define DSV4KV_HD inline
#endif
