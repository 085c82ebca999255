# Script mode (cmake -P), run at every build by src/api: writes OUTPUT, a header defining KT_GIT_REVISION as the
# checkout's short revision with "-dirty" when tracked files differ from it, or "unknown" outside a git checkout.
# The file is rewritten only when that changes, so a build recompiles kt_build_info() only then. (Taken at configure
# time instead, the stamp went stale after the next commit, and recorded benchmark results named the wrong code.)
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY "${SOURCE_DIR}"
  OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR NOT revision)
  set(revision "unknown")
else()
  execute_process(COMMAND git diff --quiet HEAD -- WORKING_DIRECTORY "${SOURCE_DIR}" RESULT_VARIABLE dirty ERROR_QUIET)
  if(dirty)
    string(APPEND revision "-dirty")
  endif()
endif()
file(WRITE "${OUTPUT}.tmp" "#define KT_GIT_REVISION \"${revision}\"\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
