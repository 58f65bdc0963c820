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
    with pytest.raises(SettingsError, match="follow_interval_s"):
        load_settings(DetectorSettings)
