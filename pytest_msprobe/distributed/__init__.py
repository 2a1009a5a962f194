"""Several hosts and devices: which host a worker runs on, the device pool of each, a host that
drops out, the workers' allocator. No pytest.
"""
