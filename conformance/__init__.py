"""Conformance: h3bench against vLLM-Omni's real ``/v1/videos`` serving code (``./dev conformance``).

- :mod:`~conformance.envbuild`: the environment (vLLM and vLLM-Omni from PyPI, outside the repo);
- :mod:`~conformance.upstream_app` (runs in that environment) and :mod:`~conformance.standin`:
  upstream's app with a stand-in H3 engine; :mod:`~conformance.serve` launches it from h3bench's own Python;
- :mod:`~conformance.probes`, :mod:`~conformance.answers`, :mod:`~conformance.compare`:
  the differential probe suite against the simulator and the deliberate differences;
- :mod:`~conformance.run`: the step itself (environment, probes, client, campaign), and with
  ``--engine-mode real`` :mod:`~conformance.realrun`: vLLM-Omni's own engine on a CPU
  (:mod:`~conformance.realengine`, ``cpu_platform``, ``tiny_h3``; docs/conformance-real-engine.md);
  :mod:`~conformance.phases`: the client and campaign phases both lanes run.
"""
