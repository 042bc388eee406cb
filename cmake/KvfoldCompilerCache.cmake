# Use ccache when it is installed: CI rebuilds from scratch, developers rebuild often.
find_program(KVFOLD_CCACHE ccache)
if(KVFOLD_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${KVFOLD_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${KVFOLD_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${KVFOLD_CCACHE})
endif()
