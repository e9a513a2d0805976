# dlpg-info: version, build info and every parameter. Links the object library directly,
# because it prints the internal parameter table (dlpg__params_print is not exported).
add_executable(dlpg-info ${CMAKE_CURRENT_LIST_DIR}/dlpg_info.c)
target_link_libraries(dlpg-info PRIVATE dlpg_obj)
install(TARGETS dlpg-info RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
