"""pycheck.py: the PASS/FAIL bookkeeping of the Python tests in dev/ (test_ddp, test_export_hf).

    from pycheck import check, failures
    check(a == b, "what was compared")   # prints PASS/FAIL, remembers failures, returns ok
"""
failures = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
    return ok
