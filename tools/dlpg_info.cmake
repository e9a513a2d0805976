# dlpg-info: version, build info, backends and every parameter. Links the object library
# directly, because it prints internal tables (dlpg__params_print is not exported). Its
# RUNPATH lets core find the NCCL module (libdlpg_nccl.so) in the build tree and, installed,
# in the library directory.
add_executable(dlpg-info ${CMAKE_CURRENT_LIST_DIR}/dlpg_info.c)
target_link_libraries(dlpg-info PRIVATE dlpg_obj)
set_target_properties(dlpg-info PROPERTIES BUILD_RPATH ${PROJECT_BINARY_DIR}
  INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS dlpg-info RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
