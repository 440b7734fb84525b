"""The launch options of the Triton kernels with and without programmatic dependent launch
(engine.pdl). When it is on is decided once, in `Kernels.resolve` (test_kernels); that the kernels
wait and let the next kernel start is checked in their compiled code (test_triton_kernels)."""

from voicewire.engine.kernels import pdl


def test_launch_options_carry_the_constant_and_the_attribute_when_on() -> None:
    assert pdl.launch_options(False) == {"PDL": False}
    assert pdl.launch_options(True) == {"PDL": True, "launch_pdl": True}
