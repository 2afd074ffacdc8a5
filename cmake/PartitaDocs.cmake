# Documentation generated from ODS.
#
# partita_add_doc(<td file stem> <output name> <mlir-tblgen command...>) runs
# mlir-tblgen on the .td file and collects the Markdown under
# ${CMAKE_BINARY_DIR}/docs/generated. The `partita-doc` target builds them
# all; docs/CMakeLists.txt and test/docs-current.test compare them with the
# committed docs/generated/.

add_custom_target(partita-doc ALL)

function(partita_add_doc td_stem output_name)
  set(LLVM_TARGET_DEFINITIONS ${td_stem}.td)
  mlir_tablegen(${output_name}.md ${ARGN})
  set(gen_file ${CMAKE_BINARY_DIR}/docs/generated/${output_name}.md)
  add_custom_command(
    OUTPUT ${gen_file}
    COMMAND ${CMAKE_COMMAND} -E copy
            ${CMAKE_CURRENT_BINARY_DIR}/${output_name}.md ${gen_file}
    DEPENDS ${CMAKE_CURRENT_BINARY_DIR}/${output_name}.md)
  add_custom_target(${output_name}DocGen DEPENDS ${gen_file})
  add_dependencies(partita-doc ${output_name}DocGen)
endfunction()
