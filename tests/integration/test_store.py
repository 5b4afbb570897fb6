"""The store's tests of tests/unit/test_store.py that take `db_url`, run here on a real
PostgreSQL database (tests/integration/conftest.py gives `db_url`): one body of tests,
both backends."""

from tests.unit.test_search import test_a_search_resumes_where_it_stopped_with_its_budget  # noqa: F401
from tests.unit.test_store import (  # noqa: F401 - collected here with this lane's db_url
    test_a_resumed_probe_run_is_counted_once,
    test_claim_attempt_takes_each_arm_once,
    test_migrations_make_exactly_the_models_schema,
    test_old_attempts_get_empty_block_fields_and_the_frame_carries_every_rows_block,
    test_release_attempt_only_moves_the_holder_it_judged,
    test_repeats_under_different_overrides_are_never_pooled,
    test_request_outcome_sums_every_cells_requests_and_failures,
    test_round_trip_and_latest_only,
    test_run_probe_stores_every_row_before_the_run_changes_state,
    test_sizes_past_2_gib_and_ids_past_2_31,
    test_store_sink_flush_and_a_bad_row_costs_only_itself,
    test_store_sink_never_writes_on_the_callers_thread,
    test_the_sign_of_trial_becomes_the_rows_kind,
    test_unfinished_probe_runs_are_not_read,
)
