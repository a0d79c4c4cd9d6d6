# Included at llama.cpp's project() by CMAKE_PROJECT_llama.cpp_INCLUDE (llamacpp-*.toml,
# [install] build_env): llama.cpp's libraries only. llama-cpp-python forces LLAMA_BUILD_COMMON
# on (a cache variable) for its multimodal library, which these agents build without
# (LLAVA_BUILD=OFF); a normal variable shadows it, so llama.cpp's common utilities and the HTTP
# library they use are not compiled: two thirds of the build, none of it loaded by the Python
# package. libllama and ggml build exactly as before.
set(LLAMA_BUILD_COMMON OFF)
