import pytest

from relaunch.common.settings import SettingsError, load_settings
from relaunch.detector.settings import DetectorSettings


def test_unknown_service_setting_is_an_error_naming_it(monkeypatch):
    monkeypatch.setenv("RELAUNCH_DETECTOR_FOLOW_INTERVAL_S", "1")
    with pytest.raises(SettingsError, match="RELAUNCH_DETECTOR_FOLOW_INTERVAL_S"):
        load_settings(DetectorSettings)


def test_known_settings_are_read(monkeypatch):
    monkeypatch.setenv("RELAUNCH_DETECTOR_FOLLOW_INTERVAL_S", "0.5")
    assert load_settings(DetectorSettings).follow_interval_s == 0.5


def test_malformed_value_is_an_error(monkeypatch):
    monkeypatch.setenv("RELAUNCH_DETECTOR_FOLLOW_INTERVAL_S", "soon")
    with pytest.raises(SettingsError, match="RELAUNCH_DETECTOR_FOLLOW_INTERVAL_S='soon' is not valid.*a number"):
        load_settings(DetectorSettings)


def test_a_setting_that_is_not_json_names_the_variable_and_what_it_expects(monkeypatch):
    # issue 40: a list setting given as plain text stopped the service with a traceback naming neither
    from relaunch.actuator.settings import ActuatorSettings

    monkeypatch.setenv("RELAUNCH_ACTUATOR_PARTITIONS", "canary")
    with pytest.raises(SettingsError) as raised:
        load_settings(ActuatorSettings)
    assert str(raised.value) == ("RELAUNCH_ACTUATOR_PARTITIONS='canary' is not valid: it expects a JSON list, "
                                 'e.g. ["a", "b"]')
    monkeypatch.setenv("RELAUNCH_ACTUATOR_PARTITIONS", '["canary"]')
    assert load_settings(ActuatorSettings).partitions == ["canary"]
