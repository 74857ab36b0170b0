"""Conformance: h3bench against vLLM-Omni's real ``/v1/videos`` serving code (``./dev conformance``).

- :mod:`~h3bench.conformance.envbuild`: the environment (vLLM and vLLM-Omni from PyPI, outside the repo);
- :mod:`~h3bench.conformance.upstream_app` (runs in that environment) and :mod:`~h3bench.conformance.standin`:
  upstream's app with a stand-in H3 engine; :mod:`~h3bench.conformance.serve` launches it from h3bench's own Python;
- :mod:`~h3bench.conformance.probes`, :mod:`~h3bench.conformance.answers`, :mod:`~h3bench.conformance.compare`:
  the differential probe suite against the simulator and the deliberate differences;
- :mod:`~h3bench.conformance.run`: the step itself (environment, probes, client, campaign), and with
  ``--engine-mode real`` :mod:`~h3bench.conformance.realrun`: vLLM-Omni's own engine on a CPU
  (:mod:`~h3bench.conformance.realengine`, ``cpu_platform``, ``tiny_h3``; docs/conformance-real-engine.md);
  :mod:`~h3bench.conformance.phases`: the client and campaign phases both lanes run.
"""
