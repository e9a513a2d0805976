// The plugin's C headers as seen from the C++ island. store.h and group.h use C11
// <stdatomic.h> types, which C++17 cannot name; std::atomic<int> has the same size,
// alignment and representation as _Atomic int on GCC and Clang, so the island spells
// atomic_int that way before including them. Only this header includes the C headers.
#pragma once

#include <atomic>

#ifndef __cplusplus
#error "c_headers.h is for the C++ island only"
#endif

#if !defined(atomic_int)
using atomic_int = std::atomic<int>;
#endif
/* The C headers include <stdatomic.h>; its include guards (GCC, Clang) keep it out of C++. */
#define _STDATOMIC_H 1
#define __CLANG_STDATOMIC_H 1

#include "dlpg/dlpg.h"
#include "base/log.h"
#include "core/group/op.h"
#include "base/params.h"
#include "base/status.h"
#include "core/lines/tensor.h"
#include "gloo/gloo.h"
#include "gloo/params.h"
#include "store/store.h"

static_assert(sizeof(std::atomic<int>) == sizeof(int), "atomic_int layout differs from int");
