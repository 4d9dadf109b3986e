# The GPU code the CUDA backend carries (included by the root CMakeLists after enable_language(CUDA)).
#
# DSV4KV_CUDA_ARCHS is a list of targets, separated by ';' or ',':
#   89, 90a, 100a, 120, ...   SASS for sm_89, sm_90a, ...: machine code, loaded as is (no JIT)
#   compute_89, ...           PTX only: the driver JIT-compiles it on first use
# Unless the list names a compute_ target itself, PTX of the lowest SASS target is added (its
# suffix dropped: sm_90a-style PTX runs on that exact GPU only), so a GPU newer than every SASS
# target still runs, after a JIT at first use. The default set is the one vLLM's Triton kernels
# for this cache cover (Ada, Hopper, datacenter and consumer Blackwell; the FP8 conversions need
# sm_89), less what the installed nvcc cannot build; a target asked for explicitly that nvcc
# cannot build stops the configure.
#
# Sets DSV4KV_CUDA_GENCODE (the nvcc flags: -gencode per target, fatbin compression) in the
# caller's scope. `bash scripts/check_fatbin.sh LIBRARY TARGET...` lists what a build carries.

set(DSV4KV_CUDA_ARCHS_DEFAULT "89;90a;100a;120")
set(DSV4KV_CUDA_ARCHS "${DSV4KV_CUDA_ARCHS_DEFAULT}" CACHE STRING
    "CUDA targets: NN[a|f] = SASS for sm_NN[a|f], compute_NN = PTX only; default ${DSV4KV_CUDA_ARCHS_DEFAULT} (those nvcc supports) + PTX of the lowest")
option(DSV4KV_CUDA_SM100 "Require sm_100a SASS (kept for compatibility: it is in the default DSV4KV_CUDA_ARCHS)" OFF)

function(_dsv4kv_cuda_archs)
  string(REPLACE "," ";" requested "${DSV4KV_CUDA_ARCHS}")
  set(explicit TRUE)
  if(DSV4KV_CUDA_ARCHS STREQUAL DSV4KV_CUDA_ARCHS_DEFAULT)
    set(explicit FALSE)
  endif()
  if(DSV4KV_CUDA_SM100 AND NOT "100a" IN_LIST requested)
    list(APPEND requested 100a)
  endif()

  # What this nvcc can build: `--list-gpu-code` names the sm_NN it has back ends for (compute_NN
  # goes with sm_NN; arch-specific "a"/"f" variants are not listed, they exist where their base
  # does). An nvcc without the switch gets every target, and reports what it cannot build itself.
  execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --list-gpu-code OUTPUT_VARIABLE known_sm RESULT_VARIABLE rc_sm ERROR_QUIET)
  set(can_list FALSE)
  if(rc_sm EQUAL 0)
    set(can_list TRUE)
    string(REGEX MATCHALL "sm_[0-9]+" known_sm "${known_sm}")
  endif()

  set(sass "")       # sm_NN[a|f]
  set(ptx "")        # compute_NN[a|f]
  set(dropped "")
  set(lowest "")
  foreach(entry IN LISTS requested)
    string(STRIP "${entry}" entry)
    if(entry STREQUAL "")
      continue()
    endif()
    if(NOT entry MATCHES "^(compute_|sm_)?([0-9]+)([af]?)$")
      message(FATAL_ERROR "DSV4KV_CUDA_ARCHS: '${entry}' is not a CUDA target (examples: 89, 90a, 100a, 120, compute_89)")
    endif()
    set(prefix "${CMAKE_MATCH_1}")
    set(num ${CMAKE_MATCH_2})
    set(suffix "${CMAKE_MATCH_3}")
    if(num LESS 89)
      message(FATAL_ERROR "DSV4KV_CUDA_ARCHS: '${entry}' is below sm_89, the first architecture with the FP8 (e4m3) conversions the kernels use")
    endif()
    if(can_list AND NOT "sm_${num}" IN_LIST known_sm)
      if(explicit OR (DSV4KV_CUDA_SM100 AND entry STREQUAL "100a"))
        message(FATAL_ERROR "DSV4KV_CUDA_ARCHS: ${CMAKE_CUDA_COMPILER} (CUDA ${CMAKE_CUDA_COMPILER_VERSION}) cannot build '${entry}'")
      endif()
      list(APPEND dropped ${entry})
      continue()
    endif()
    if(prefix STREQUAL "compute_")
      list(APPEND ptx compute_${num}${suffix})
    else()
      list(APPEND sass sm_${num}${suffix})
      if(lowest STREQUAL "" OR num LESS lowest)
        set(lowest ${num})
      endif()
    endif()
  endforeach()
  if(dropped)
    list(JOIN dropped ", " dropped)
    message(STATUS "dsv4kv: nvcc ${CMAKE_CUDA_COMPILER_VERSION} cannot build ${dropped}: left out of the default set")
  endif()
  if(NOT ptx AND NOT lowest STREQUAL "")
    set(ptx compute_${lowest})
  endif()
  list(REMOVE_DUPLICATES sass)
  list(REMOVE_DUPLICATES ptx)
  if(NOT sass AND NOT ptx)
    message(FATAL_ERROR "DSV4KV_CUDA_ARCHS: no target left to build ('${DSV4KV_CUDA_ARCHS}')")
  endif()

  # One -gencode per virtual architecture, naming every code built from it (one front-end pass each).
  set(gencode "")
  set(virtuals "")
  foreach(code IN LISTS sass ptx)
    string(REGEX REPLACE "^(sm|compute)_" "compute_" virtual "${code}")
    list(APPEND virtuals ${virtual})
  endforeach()
  list(REMOVE_DUPLICATES virtuals)
  foreach(virtual IN LISTS virtuals)
    set(codes "")
    foreach(code IN LISTS sass ptx)
      string(REGEX REPLACE "^(sm|compute)_" "compute_" v "${code}")
      if(v STREQUAL virtual)
        list(APPEND codes ${code})
      endif()
    endforeach()
    list(JOIN codes "," codes)
    list(APPEND gencode "-gencode=arch=${virtual},code=[${codes}]")
  endforeach()

  # Compress the SASS too (nvcc compresses only PTX by default): the template instantiations make
  # the cubins repetitive, and the default set shrinks from about 8.9 MB of fatbin to 1.2 MB. Each
  # image is unpacked once, when its module is loaded, not at every launch.
  list(APPEND gencode -Xfatbin=-compress-all)

  set(shown_sass "${sass}")
  if(NOT sass)
    set(shown_sass "none")
  endif()
  message(STATUS "dsv4kv: CUDA SASS ${shown_sass}; PTX ${ptx}")
  set(DSV4KV_CUDA_GENCODE ${gencode} PARENT_SCOPE)
endfunction()

_dsv4kv_cuda_archs()
