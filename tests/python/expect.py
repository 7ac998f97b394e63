"""What the NumPy package's tests share: a call that must raise."""


def expect_error(failures, name, cls, words, fn):
    """Appends to failures unless fn() raises cls with `words` in its message."""
    try:
        fn()
    except cls as e:
        if words not in str(e):
            failures.append(f"{name}: message {str(e)!r} lacks {words!r}")
        return
    except Exception as e:  # noqa: BLE001
        failures.append(f"{name}: raised {type(e).__name__}: {e}, want {cls.__name__}")
        return
    failures.append(f"{name}: no exception, want {cls.__name__}")
