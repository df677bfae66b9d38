"""Recording sanitizers and matchers: nothing is recorded in live mode, so each is a no-op."""

from __future__ import annotations


def _nothing(*args, **kwargs):
    return None


add_general_regex_sanitizer = _nothing
add_general_string_sanitizer = _nothing
add_oauth_response_sanitizer = _nothing
add_remove_header_sanitizer = _nothing
add_body_key_sanitizer = _nothing
add_header_regex_sanitizer = _nothing
set_custom_default_matcher = _nothing
