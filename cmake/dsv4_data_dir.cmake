# The build tree's data directory, <build>/share/dsv4_oracle: a copy of the files an installed
# dsv4-verify finds in <prefix>/share/dsv4_oracle (verify/paths/data_dir.h), so that every binary
# of the build finds its data the same way an installed one does, relative to itself, never in
# the source tree. Refreshed whenever a source file changes; dsv4_verify depends on it, so every
# binary that can look for data is built after it.
set(DSV4_BUILD_DATA_DIR "${CMAKE_BINARY_DIR}/share/dsv4_oracle")
file(GLOB DSV4_TOLERANCE_TABLES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/data/tolerances/*.json")
set(DSV4_PLOT_SCRIPT_SOURCE "${PROJECT_SOURCE_DIR}/scripts/plot_precision_report.py")
# Emptied at each configure, so that a table removed from data/ does not linger in the copy.
file(REMOVE_RECURSE "${DSV4_BUILD_DATA_DIR}")

set(dsv4_staged_data)
foreach(source ${DSV4_TOLERANCE_TABLES} ${DSV4_PLOT_SCRIPT_SOURCE})
  get_filename_component(name "${source}" NAME)
  if(source IN_LIST DSV4_TOLERANCE_TABLES)
    set(staged "${DSV4_BUILD_DATA_DIR}/tolerances/${name}")
  else()
    set(staged "${DSV4_BUILD_DATA_DIR}/${name}")
  endif()
  add_custom_command(OUTPUT "${staged}" COMMAND ${CMAKE_COMMAND} -E copy "${source}" "${staged}"
                     DEPENDS "${source}" COMMENT "Copying ${name} into the build's data directory" VERBATIM)
  list(APPEND dsv4_staged_data "${staged}")
endforeach()
add_custom_target(dsv4_data ALL DEPENDS ${dsv4_staged_data})
add_dependencies(dsv4_verify dsv4_data)
