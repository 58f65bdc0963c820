"""relaunch.common: what every relaunch part shares (schemas, subjects, settings, bus, errors)."""
