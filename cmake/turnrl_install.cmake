# Install rule and exported package: a user's trainer does find_package(turnrl) and links turnrl::turnrl
# (every layer), or one layer's library (turnrl::core, turnrl::algo, turnrl::model, turnrl::rl,
# turnrl::kernels) with those below it.
include(CMakePackageConfigHelpers)

install(TARGETS turnrl ${TURNRL_LAYER_TARGETS} EXPORT turnrlTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/turnrl DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Data the library finds relative to the installed program (core/install_paths.h), laid out as in
# the source tree: the Python backend's worker script and the shipped configs.
install(FILES python/turnrl_eval_worker.py DESTINATION ${CMAKE_INSTALL_DATADIR}/turnrl/python)
install(DIRECTORY configs DESTINATION ${CMAKE_INSTALL_DATADIR}/turnrl FILES_MATCHING PATTERN "*.yaml")
# The Qwen3 tokenizer files scripts/setup.sh fetched (Apache-2.0), for `turnrl init-model`;
# Llama-3's stay out of the install (Meta's license), so llama3 presets need --tokenizer there.
if(EXISTS ${PROJECT_SOURCE_DIR}/.deps/hf-tokenizers/qwen3/tokenizer.json)
  install(DIRECTORY .deps/hf-tokenizers/qwen3 DESTINATION ${CMAKE_INSTALL_DATADIR}/turnrl/.deps/hf-tokenizers)
endif()
if(TARGET turnrl_cli)
  install(TARGETS turnrl_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT turnrlTargets NAMESPACE turnrl:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/turnrl)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/turnrlConfig.cmake.in
  ${PROJECT_BINARY_DIR}/turnrlConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/turnrl)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/turnrlConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/turnrlConfig.cmake ${PROJECT_BINARY_DIR}/turnrlConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/turnrl)
