# partita_add_unittest(<name> <sources...>): a GoogleTest binary (name ending
# in Tests) that lit's GoogleTest format runs (unittests/lit.cfg.py). Binaries
# from anywhere in the tree land under the build's unittests/ folder, mirroring
# their source folder (runtime/test/core -> unittests/runtime/test/core).
# Included by the top-level CMakeLists.txt, so that the runtime's tests have
# it in a runtime-only build (PARTITA_BUILD_COMPILER=OFF) too.
add_custom_target(PartitaUnitTests)
set_target_properties(PartitaUnitTests PROPERTIES FOLDER "Tests")

function(partita_add_unittest name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE GTest::gtest GTest::gtest_main)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  string(REGEX REPLACE "^unittests/?" "" rel "${rel}")
  set_target_properties(${name} PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/unittests/${rel})
  add_dependencies(PartitaUnitTests ${name})
endfunction()
