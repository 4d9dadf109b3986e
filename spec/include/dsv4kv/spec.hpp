/// \file spec.hpp
/// \brief Umbrella header of the dsv4kv specification: layout, records, numerics,
/// per-element semantics, checked integer arithmetic, argument structs and their validation, the table of operations.
#pragma once

#include "dsv4kv/spec/checked.hpp"
#include "dsv4kv/spec/config.hpp"
#include "dsv4kv/spec/error.hpp"
#include "dsv4kv/spec/layout.hpp"
#include "dsv4kv/spec/numerics.hpp"
#include "dsv4kv/spec/op_table.hpp"
#include "dsv4kv/spec/ops.hpp"
#include "dsv4kv/spec/record_numerics.hpp"
#include "dsv4kv/spec/records.hpp"
#include "dsv4kv/spec/semantics.hpp"
#include "dsv4kv/spec/tensor.hpp"
