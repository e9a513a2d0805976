# dlpg-store: the standalone TCP store server for multi-host jobs. Links the object library,
# because the server (dlpg__tcp_server_*) is internal and not exported by libdlpg.so.
add_executable(dlpg-store ${CMAKE_CURRENT_LIST_DIR}/dlpg_store.c)
target_link_libraries(dlpg-store PRIVATE dlpg_obj)
target_compile_definitions(dlpg-store PRIVATE _GNU_SOURCE)
install(TARGETS dlpg-store RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
