# The wheel's native half (scikit-build-core sets SKBUILD; pyproject.toml builds the target
# dlpg_wheel and installs the component "wheel" into the wheel's platlib):
#   dlpg/_native/   libdlpg.so.0 (its SONAME), libdlpg.so (a linker script naming
#                   libdlpg.so.0: a wheel holds no symbolic links, and one real file keeps the
#                   library loaded once), the modules built (libdlpg_nccl.so, libdlpg_xla.so),
#                   dlpg-store, dlpg-info, dlpg-bench, pkgconfig/dlpg.pc
#   dlpg/include/   dlpg/dlpg.h, dlpg/dlpg_version.h, dlpack/dlpack.h (dlpg.h includes it)
# so that C programs compile and link against the installed package (`python -m dlpg --cflags
# --libs`, or PKG_CONFIG_PATH=$(python -m dlpg --pkgconfigdir)). Everything finds its siblings
# through an $ORIGIN run path (DLPG_ORIGIN_RPATH, set by pyproject.toml).
set(_dlpg_native dlpg/_native)
# Beside libdlpg: the tools, and the modules and dlpg-bench where this configuration has them.
set(_dlpg_wheel_parts dlpg-store dlpg-info)
foreach(_t dlpg_nccl dlpg_xla dlpg-bench)
  if(TARGET ${_t})
    list(APPEND _dlpg_wheel_parts ${_t})
  endif()
endforeach()
add_custom_target(dlpg_wheel ALL)
add_dependencies(dlpg_wheel dlpg ${_dlpg_wheel_parts})

install(FILES $<TARGET_FILE:dlpg> DESTINATION ${_dlpg_native} RENAME libdlpg.so.0
  COMPONENT wheel)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/wheel/libdlpg.so
  "/* The link-time name of libdlpg.so.0 (GNU ld script), as libc.so is glibc's. */\n"
  "INPUT(libdlpg.so.0)\n")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/wheel/libdlpg.so DESTINATION ${_dlpg_native}
  COMPONENT wheel)
# (A COMPONENT belongs to the artifact kind before it: each kind names its own.)
install(TARGETS ${_dlpg_wheel_parts}
  LIBRARY DESTINATION ${_dlpg_native} COMPONENT wheel
  RUNTIME DESTINATION ${_dlpg_native} COMPONENT wheel)

install(FILES include/dlpg/dlpg.h ${CMAKE_CURRENT_BINARY_DIR}/include/dlpg/dlpg_version.h
  DESTINATION dlpg/include/dlpg COMPONENT wheel)
get_target_property(_dlpg_dlpack_inc dlpack::dlpack INTERFACE_INCLUDE_DIRECTORIES)
find_file(DLPG_DLPACK_HEADER dlpack/dlpack.h HINTS ${_dlpg_dlpack_inc} REQUIRED)
install(FILES ${DLPG_DLPACK_HEADER} DESTINATION dlpg/include/dlpack COMPONENT wheel)

file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/wheel/dlpg.pc
  "# Inside the installed Python package: paths relative to this file.\n"
  "libdir=\${pcfiledir}/..\n"
  "includedir=\${pcfiledir}/../../include\n\n"
  "Name: dlpg\n"
  "Description: a process group over DLPack tensors (the Python package's copy)\n"
  "Version: ${PROJECT_VERSION}\n"
  "Libs: -L\${libdir} -Wl,-rpath,\${libdir} -ldlpg\n"
  "Cflags: -I\${includedir}\n")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/wheel/dlpg.pc DESTINATION ${_dlpg_native}/pkgconfig
  COMPONENT wheel)
