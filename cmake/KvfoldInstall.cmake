# `cmake --install build [--prefix P]` lays out a self-contained tree:
#   P/bin/                      kvfold, kvfold-inference, kvfold-memory (those built), and
#                               kvfold-stage-model (the pod init step)
#   P/share/kvfold/projectors/  trained projectors, one directory each; a binary finds them
#                               relative to its own location (common/install_paths.h)
#   P/share/kvfold/k8s/         the kustomize base, overlays and components
#   P/share/doc/kvfold/         README and docs/
# Runtime libraries come from the system (Debian packages; docker/Dockerfile lists them).
include(GNUInstallDirs)

foreach(kvfold_binary kvfold kvfold-inference kvfold-memory kvfold-memory-admin)
  if(TARGET ${kvfold_binary})
    install(TARGETS ${kvfold_binary} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()
install(PROGRAMS ${PROJECT_SOURCE_DIR}/scripts/kvfold-stage-model
  DESTINATION ${CMAKE_INSTALL_BINDIR})

# models/<name>-projector/ -> share/kvfold/projectors/<name>/ (weights, config, model card).
file(GLOB kvfold_projector_dirs LIST_DIRECTORIES true ${PROJECT_SOURCE_DIR}/models/*-projector)
foreach(dir ${kvfold_projector_dirs})
  get_filename_component(dir_name ${dir} NAME)
  string(REGEX REPLACE "-projector$" "" model_name ${dir_name})
  install(FILES ${dir}/projector.json ${dir}/projector.safetensors ${dir}/README.md
    DESTINATION ${CMAKE_INSTALL_DATADIR}/kvfold/projectors/${model_name})
endforeach()

install(DIRECTORY ${PROJECT_SOURCE_DIR}/k8s/ DESTINATION ${CMAKE_INSTALL_DATADIR}/kvfold/k8s
  PATTERN "__pycache__" EXCLUDE)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})
