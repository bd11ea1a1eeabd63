# Smoke test of the spikejit CLI, run by CTest:
#   cmake -DCLI=<path of spikejit> -DSRC=<source dir> -P cli_smoke.cmake
# Each case runs the CLI and checks its exit code and what it printed.

set(failures 0)

# expect(RC <code> [OUT <regex>] [ERR <regex>] ARGS <arguments>...)
function(expect)
  cmake_parse_arguments(E "" "RC;OUT;ERR" "ARGS" ${ARGN})
  execute_process(COMMAND ${CLI} ${E_ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(problem "")
  if(NOT "${rc}" STREQUAL "${E_RC}")
    set(problem "exit code ${rc}, expected ${E_RC}")
  elseif(DEFINED E_OUT AND NOT out MATCHES "${E_OUT}")
    set(problem "stdout does not match '${E_OUT}'")
  elseif(DEFINED E_ERR AND NOT err MATCHES "${E_ERR}")
    set(problem "stderr does not match '${E_ERR}'")
  endif()
  if(problem)
    message("FAIL spikejit ${E_ARGS}: ${problem}\n--- stdout:\n${out}--- stderr:\n${err}")
    math(EXPR n "${failures} + 1")
    set(failures ${n} PARENT_SCOPE)
  else()
    message("ok   spikejit ${E_ARGS}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
endfunction()

set(lif ${SRC}/neurons/lif.sj)

# Help.
expect(RC 0 OUT "usage: spikejit COMMAND.*check.*grad.*run.*emit" ARGS help)
expect(RC 0 OUT "usage: spikejit COMMAND" ARGS --help)
expect(RC 0 OUT "usage: spikejit cache" ARGS help cache)
foreach(cmd check grad run emit)
  expect(RC 0 OUT "usage: spikejit ${cmd} FILE" ARGS ${cmd} --help)
  expect(RC 0 OUT "usage: spikejit ${cmd} FILE" ARGS help ${cmd})
endforeach()

# A good neuron, from its file and as a built-in: the same canonical text.
expect(RC 0 OUT "neuron lif.*spike\\(" ARGS check ${lif})
set(file_text "${last_out}")
expect(RC 0 OUT "neuron lif" ARGS check builtin:lif)
if(NOT file_text STREQUAL last_out)
  message("FAIL check: neurons/lif.sj and builtin:lif print different canonical text")
  math(EXPR failures "${failures} + 1")
endif()
expect(RC 0 OUT "^[0-9a-f]+\n$" ARGS check ${lif} --hash)
expect(RC 0 OUT "forward step.*backward step.*saved 0 = forward %" ARGS grad ${lif})
expect(RC 0 OUT "neuron lif_tangent.*input x_tangent.*state v_tangent = 0.*output s_tangent" ARGS grad ${lif} --tangent)
expect(RC 0 OUT "saved 0 = forward %[0-9]+ \\(packed bits\\).*saves 1 value.*\\(bits\\)"
       ARGS grad ${SRC}/tests/neurons/ste_lif.sj --pack-spikes)
expect(RC 0 OUT "output s: firing rate 0\\.[0-9]+.*neuron-steps/s"
       ARGS run ${lif} --steps 20 --neurons 100 --seed 3)
expect(RC 0 OUT "firing rate.*neuron-steps/s"
       ARGS run ${lif} --steps 5 --neurons 33 --train --dtype float16 --threads 2 --set tau=4)
expect(RC 0 OUT "dL/dw.*firing rate" ARGS run builtin:plif --steps 8 --neurons 50 --train --dtype bfloat16)
expect(RC 0 OUT "firing rate" ARGS run builtin:if --steps 3 --neurons 7 --dtype float64 --repeat 1)
expect(RC 0 OUT "kernel inference:.*__global__.*kernel inference_final_state:.*kernel training_forward:.*kernel backward:"
       ARGS emit ${lif})
expect(RC 0 OUT "kernel backward:.*__global__" ARGS emit builtin:plif --kind backward --dtype bfloat16)

# Broken neuron files: every problem with file:line:col, exit code 1.
set(broken ${CMAKE_CURRENT_BINARY_DIR}/cli_smoke_broken.sj)
file(WRITE ${broken} "neuron broken\ninput x\nstate v = 0\noutput s\nh = v + y\ns = spike(h - 1, no_such_surrogate)\nv = h - s\n")
expect(RC 1 ERR "cli_smoke_broken.sj:5:[0-9]+: error.*cli_smoke_broken.sj:6:[0-9]+: error" ARGS check ${broken})
expect(RC 1 ERR "cli_smoke_broken.sj:5:[0-9]+:" ARGS run ${broken} --steps 2 --neurons 2)
file(WRITE ${broken} "neuron broken\ninput x\nstate v = 0\noutput s\ns = spike(v + * x)\nv = x\n")
expect(RC 1 ERR "cli_smoke_broken.sj:5:[0-9]+: error" ARGS grad ${broken})
file(WRITE ${broken} "")
expect(RC 1 ERR "error" ARGS check ${broken})
expect(RC 1 ERR "cannot read" ARGS check ${CMAKE_CURRENT_BINARY_DIR}/no_such_file.sj)
expect(RC 1 ERR "unknown built-in neuron .builtin:no_such_neuron." ARGS check builtin:no_such_neuron)
expect(RC 1 ERR "no_such_constant" ARGS check ${lif} --set no_such_constant=1)

# Bad usage: exit code 2 and a pointer to --help.
expect(RC 2 ERR "usage" ARGS)
expect(RC 2 ERR "unknown command" ARGS frobnicate)
expect(RC 2 ERR "missing FILE.*--help" ARGS check)
expect(RC 2 ERR "unexpected argument" ARGS check ${lif} extra)
expect(RC 2 ERR "unknown option '--bogus'" ARGS check ${lif} --bogus)
expect(RC 2 ERR "--steps and --neurons are required" ARGS run ${lif})
expect(RC 2 ERR "--steps: expected an integer" ARGS run ${lif} --steps x --neurons 10)
expect(RC 2 ERR "--neurons: expected an integer" ARGS run ${lif} --steps 10 --neurons 0)
expect(RC 2 ERR "--neurons: expected an integer" ARGS run ${lif} --steps 10 --neurons -5)
expect(RC 2 ERR "--dtype" ARGS run ${lif} --steps 10 --neurons 10 --dtype int8)
expect(RC 2 ERR "--threads needs a value" ARGS run ${lif} --steps 10 --neurons 10 --threads)
expect(RC 2 ERR "--set expects NAME=VALUE" ARGS check ${lif} --set tau)
expect(RC 2 ERR "--set tau: expected a number" ARGS check ${lif} --set tau=fast)
expect(RC 2 ERR "--kind: expected" ARGS emit ${lif} --kind everything)
expect(RC 2 ERR "--dtype" ARGS emit ${lif} --dtype float64)
expect(RC 2 ERR "unknown action 'bogus'" ARGS cache bogus)
expect(RC 2 ERR "too large" ARGS run ${lif} --steps 1000000000000 --neurons 1000000000000)

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} CLI smoke case(s) failed")
endif()
