# Writes the linker version script from plugin/exported-symbols.txt, the one list of the
# exported ABI (ci/check-symbols.sh diffs the built library against the same file): dlpg_*
# names listed there are global, everything else local (internal dlpg__* names also begin
# with "dlpg_", so the list is explicit).
function(dlpg_version_script list_file out_file)
  file(STRINGS ${list_file} syms REGEX "^dlpg_")
  set(body "/* Generated from ${list_file}; do not edit. */\nDLPG_0 {\n  global:\n")
  foreach(s ${syms})
    string(APPEND body "    ${s};\n")
  endforeach()
  string(APPEND body "  local:\n    *;\n};\n")
  file(WRITE ${out_file}.tmp "${body}")
  configure_file(${out_file}.tmp ${out_file} COPYONLY)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${list_file})
endfunction()
