# plugin/xla: libdlpg_xla.so, the XLA FFI handlers JAX registers (python_shim/dlpg/jax.py).
# Built only when jaxlib's FFI C API header is found: DLPG_XLA_FFI_INCLUDE_DIR (a folder
# holding xla/ffi/api/c_api.h), else jaxlib's include folder (what jax.ffi.include_dir() says),
# asked of DLPG_XLA_PYTHON (in a wheel build, the build environment's Python, which has jaxlib
# but no jax). It links no dlpg, XLA or CUDA library: dlpg is reached through dlpg_get_api of
# the libdlpg.so the host names at run time.
set(DLPG_XLA_FFI_INCLUDE_DIR "" CACHE PATH "folder with xla/ffi/api/c_api.h (jax.ffi.include_dir())")
if(DEFINED Python_EXECUTABLE)
  set(_dlpg_xla_python_default "${Python_EXECUTABLE}")
else()
  set(_dlpg_xla_python_default python3)
endif()
set(DLPG_XLA_PYTHON "${_dlpg_xla_python_default}" CACHE STRING
  "python used to ask jaxlib for its FFI include folder")

set(_dlpg_xla_inc "${DLPG_XLA_FFI_INCLUDE_DIR}")
set(_dlpg_xla_why "")
if(NOT _dlpg_xla_inc)
  execute_process(COMMAND ${DLPG_XLA_PYTHON} -c
    "import os, jaxlib; print(os.path.join(os.path.dirname(jaxlib.__file__), 'include'))"
    OUTPUT_VARIABLE _dlpg_xla_inc RESULT_VARIABLE _dlpg_xla_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET TIMEOUT 60)
  if(NOT _dlpg_xla_rc EQUAL 0)
    set(_dlpg_xla_inc "")
    set(_dlpg_xla_why "no DLPG_XLA_FFI_INCLUDE_DIR and '${DLPG_XLA_PYTHON}' cannot import jaxlib")
  endif()
endif()
if(_dlpg_xla_inc AND NOT EXISTS "${_dlpg_xla_inc}/xla/ffi/api/c_api.h")
  set(_dlpg_xla_why "${_dlpg_xla_inc}/xla/ffi/api/c_api.h does not exist")
  set(_dlpg_xla_inc "")
endif()

if(_dlpg_xla_inc)
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_INCLUDES "${_dlpg_xla_inc}")
  check_c_source_compiles("#include \"xla/ffi/api/c_api.h\"
int main(void) { XLA_FFI_DeviceOrdinal_Get_Args a; a.device_ordinal = 0; return a.device_ordinal; }"
    DLPG_XLA_HAVE_DEVICE_ORDINAL)
  check_c_source_compiles("#include \"xla/ffi/api/c_api.h\"
int f(XLA_FFI_Metadata_Extension *m) { return m->extension_base.type == XLA_FFI_Extension_Metadata; }
int main(void) { return f(0); }" DLPG_XLA_EXTENSION_HAS_TYPE)
  unset(CMAKE_REQUIRED_INCLUDES)
  file(GLOB DLPG_XLA_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.c)
  add_library(dlpg_xla SHARED ${DLPG_XLA_SOURCES})
  target_include_directories(dlpg_xla PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include "${_dlpg_xla_inc}")
  target_link_libraries(dlpg_xla PRIVATE dlpack::dlpack ${CMAKE_DL_LIBS} Threads::Threads)
  target_compile_options(dlpg_xla PRIVATE -fvisibility=hidden)
  target_compile_definitions(dlpg_xla PRIVATE _GNU_SOURCE
    $<$<BOOL:${DLPG_XLA_HAVE_DEVICE_ORDINAL}>:DLPG_XLA_HAVE_DEVICE_ORDINAL=1>
    $<$<BOOL:${DLPG_XLA_EXTENSION_HAS_TYPE}>:DLPG_XLA_EXTENSION_HAS_TYPE=1>)
  target_link_options(dlpg_xla PRIVATE -Wl,--no-undefined)
  message(STATUS "dlpg: XLA FFI part ON (headers in ${_dlpg_xla_inc}; device ordinal: ${DLPG_XLA_HAVE_DEVICE_ORDINAL})")
else()
  message(STATUS "dlpg: XLA FFI part skipped: ${_dlpg_xla_why}")
endif()
