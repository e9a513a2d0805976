# The warning flags of every C and C++ target of the project, in one place: included once at
# the top of the project (and of the fuzz/ project), before any target is defined, so every
# target of this folder and its subfolders gets them, a new one included without a line of
# its own. -Werror=implicit-function-declaration: a C call to an undeclared function is
# a bug whatever the compiler's default (gcc 12 only warns in C11).
#
# DLPG_WERROR adds -Werror to the same targets. It is OFF by default, so that a user whose
# compiler warns about something gcc 12 and clang 14 do not still gets a build; CI turns it
# on (ci/test.sh, ci/sanitize.sh, ci/fuzz.sh), so the tree stays warning-free.
option(DLPG_WERROR "Treat compiler warnings as errors in every dlpg target" OFF)
add_compile_options(
  "$<$<COMPILE_LANGUAGE:C,CXX>:-Wall;-Wextra>"
  "$<$<COMPILE_LANGUAGE:C>:-Werror=implicit-function-declaration>")
if(DLPG_WERROR)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-Werror>")
endif()
