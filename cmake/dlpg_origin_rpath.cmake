# DLPG_ORIGIN_RPATH: the library, its backend modules and the tools look for their shared
# libraries in their own folder first ($ORIGIN), so a copy of them with the libraries they
# need beside them (the Python wheel, the GPU bundle) works wherever it is unpacked, without
# LD_LIBRARY_PATH. It is written as DT_RPATH (--disable-new-dtags), not DT_RUNPATH: a RUNPATH
# serves only the object's own dependencies, while an RPATH is searched for the dependencies
# of what it loads too, and the bundled libgloo's own dependencies (libibverbs, libnl) are
# beside it as well. Exactly $ORIGIN, no build-tree folder, so nothing points back here.
option(DLPG_ORIGIN_RPATH "Search $ORIGIN (DT_RPATH) for dependencies, for bundles and wheels" OFF)
if(DLPG_ORIGIN_RPATH)
  foreach(_dlpg_t dlpg dlpg_nccl dlpg_xla dlpg-store dlpg-info dlpg-bench)
    if(TARGET ${_dlpg_t})
      set_target_properties(${_dlpg_t} PROPERTIES BUILD_WITH_INSTALL_RPATH ON
        INSTALL_RPATH "\$ORIGIN")
      target_link_options(${_dlpg_t} PRIVATE -Wl,--disable-new-dtags)
    endif()
  endforeach()
  message(STATUS "dlpg: \$ORIGIN run path ON")
endif()
