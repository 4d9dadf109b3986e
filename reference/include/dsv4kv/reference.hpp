/// \file reference.hpp
/// \brief The scalar C++ reference of the operations (the oracle, and the CPU fallback).
///
/// Each function validates its arguments with the shared `dsv4kv::validate()`
/// (throwing dsv4kv::Error), then follows the spec's steps on host memory.
/// `error_count`, when given, is a host pointer.
#pragma once

#include "dsv4kv/spec.hpp"

namespace dsv4kv::reference {

/// One function per entry of DSV4KV_OPS (op_table.hpp), e.g.
/// `void quantize_and_insert_k_cache(const QuantizeInsertArgs& args);`. Each follows the spec
/// section of the same name; the argument struct documents the arguments.
#define DSV4KV_REFERENCE_DECLARE(name, Args, stem) void name(const Args& args);
DSV4KV_OPS(DSV4KV_REFERENCE_DECLARE)
#undef DSV4KV_REFERENCE_DECLARE

}  // namespace dsv4kv::reference
