"""Baseline: the schema as the last version without migrations made it (with create_all).

A database of that version has no alembic_version table; `campaign.store.migrate.upgrade`
completes what it lacks of this schema and stamps it with this revision.

Revision ID: 0001
Revises: 
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('campaign',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(), nullable=False),
    sa.Column('title', sa.String(), nullable=False),
    sa.Column('source_path', sa.String(), nullable=False),
    sa.Column('file_digest', sa.String(), nullable=False),
    sa.Column('spec_json', sa.String(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('campaign', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_campaign_name'), ['name'], unique=True)

    op.create_table('runner',
    sa.Column('campaign_name', sa.String(), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('host', sa.String(), nullable=False),
    sa.Column('process_start', sa.Float(), nullable=True),
    sa.Column('command', sa.String(), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('campaign_name')
    )
    op.create_table('arm',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('arm_id', sa.String(), nullable=False),
    sa.Column('model', sa.String(), nullable=False),
    sa.Column('quant', sa.String(), nullable=False),
    sa.Column('bits_per_weight', sa.Float(), nullable=False),
    sa.Column('runtime', sa.String(), nullable=False),
    sa.Column('adapter', sa.String(), nullable=False),
    sa.Column('context', sa.Integer(), nullable=False),
    sa.Column('klass', sa.String(), nullable=False),
    sa.Column('group', sa.String(), nullable=False),
    sa.Column('recipe_json', sa.String(), nullable=False),
    sa.Column('simulated', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaign.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('campaign_id', 'arm_id')
    )
    with op.batch_alter_table('arm', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_arm_campaign_id'), ['campaign_id'], unique=False)

    op.create_table('attempt',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('item_key', sa.String(), nullable=False),
    sa.Column('arm_id', sa.String(), nullable=False),
    sa.Column('repeat', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('error', sa.String(), nullable=False),
    sa.Column('overrides_json', sa.String(), nullable=False),
    sa.Column('owner_pid', sa.Integer(), nullable=True),
    sa.Column('server_pgid', sa.Integer(), nullable=True),
    sa.Column('server_cmdline', sa.String(), nullable=False),
    sa.Column('server_log', sa.String(), nullable=False),
    sa.Column('device_lease', sa.String(), nullable=False),
    sa.Column('served_model', sa.String(), nullable=False),
    sa.Column('fingerprint', sa.String(), nullable=False),
    sa.Column('identity_json', sa.String(), nullable=False),
    sa.Column('rss_bytes', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaign.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('attempt', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_attempt_arm_id'), ['arm_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_attempt_campaign_id'), ['campaign_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_attempt_item_key'), ['item_key'], unique=False)

    op.create_table('event',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('item_key', sa.String(), nullable=False),
    sa.Column('arm_id', sa.String(), nullable=False),
    sa.Column('kind', sa.String(), nullable=False),
    sa.Column('from_state', sa.String(), nullable=False),
    sa.Column('to_state', sa.String(), nullable=False),
    sa.Column('message', sa.String(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaign.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('event', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_event_campaign_id'), ['campaign_id'], unique=False)

    op.create_table('queue_item',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('title', sa.String(), nullable=False),
    sa.Column('state', sa.String(), nullable=False),
    sa.Column('gate', sa.String(), nullable=True),
    sa.Column('reason', sa.String(), nullable=False),
    sa.Column('spec_json', sa.String(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaign.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('campaign_id', 'key')
    )
    with op.batch_alter_table('queue_item', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_queue_item_campaign_id'), ['campaign_id'], unique=False)

    op.create_table('verdict',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('gate_id', sa.String(), nullable=False),
    sa.Column('verdict', sa.String(), nullable=False),
    sa.Column('reason', sa.String(), nullable=False),
    sa.Column('evidence_json', sa.String(), nullable=False),
    sa.Column('computed_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaign.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('verdict', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_verdict_campaign_id'), ['campaign_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_verdict_gate_id'), ['gate_id'], unique=False)

    op.create_table('probe_run',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('attempt_id', sa.Integer(), nullable=False),
    sa.Column('probe', sa.String(), nullable=False),
    sa.Column('context', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(), nullable=False),
    sa.Column('error', sa.String(), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['attempt_id'], ['attempt.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('probe_run', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_probe_run_attempt_id'), ['attempt_id'], unique=False)

    op.create_table('measurement',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('attempt_id', sa.Integer(), nullable=False),
    sa.Column('probe_run_id', sa.Integer(), nullable=False),
    sa.Column('item_key', sa.String(), nullable=False),
    sa.Column('arm_id', sa.String(), nullable=False),
    sa.Column('repeat', sa.Integer(), nullable=False),
    sa.Column('probe', sa.String(), nullable=False),
    sa.Column('scenario', sa.String(), nullable=False),
    sa.Column('mode', sa.String(), nullable=False),
    sa.Column('context', sa.Integer(), nullable=False),
    sa.Column('trial', sa.Integer(), nullable=False),
    sa.Column('metric', sa.String(), nullable=False),
    sa.Column('value', sa.Float(), nullable=False),
    sa.Column('unit', sa.String(), nullable=False),
    sa.Column('source', sa.String(), nullable=False),
    sa.Column('simulated', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['attempt_id'], ['attempt.id'], ),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaign.id'], ),
    sa.ForeignKeyConstraint(['probe_run_id'], ['probe_run.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('probe_run_id', 'scenario', 'mode', 'context', 'trial', 'metric')
    )
    with op.batch_alter_table('measurement', schema=None) as batch_op:
        batch_op.create_index('ix_measurement_arm_metric', ['campaign_id', 'arm_id', 'metric'], unique=False)
        batch_op.create_index(batch_op.f('ix_measurement_attempt_id'), ['attempt_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_measurement_campaign_id'), ['campaign_id'], unique=False)
        batch_op.create_index('ix_measurement_item', ['campaign_id', 'item_key'], unique=False)

    op.create_table('request_record',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('probe_run_id', sa.Integer(), nullable=False),
    sa.Column('scenario', sa.String(), nullable=False),
    sa.Column('mode', sa.String(), nullable=False),
    sa.Column('trial', sa.Integer(), nullable=False),
    sa.Column('ok', sa.Boolean(), nullable=False),
    sa.Column('error', sa.String(), nullable=False),
    sa.Column('raw_json', sa.String(), nullable=False),
    sa.ForeignKeyConstraint(['probe_run_id'], ['probe_run.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('request_record', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_request_record_probe_run_id'), ['probe_run_id'], unique=False)

    op.create_table('sample',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('probe_run_id', sa.Integer(), nullable=False),
    sa.Column('series', sa.String(), nullable=False),
    sa.Column('t_s', sa.Float(), nullable=False),
    sa.Column('value', sa.Float(), nullable=False),
    sa.Column('label', sa.String(), nullable=False),
    sa.ForeignKeyConstraint(['probe_run_id'], ['probe_run.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('sample', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_sample_probe_run_id'), ['probe_run_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('sample', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_sample_probe_run_id'))

    op.drop_table('sample')
    with op.batch_alter_table('request_record', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_request_record_probe_run_id'))

    op.drop_table('request_record')
    with op.batch_alter_table('measurement', schema=None) as batch_op:
        batch_op.drop_index('ix_measurement_item')
        batch_op.drop_index(batch_op.f('ix_measurement_campaign_id'))
        batch_op.drop_index(batch_op.f('ix_measurement_attempt_id'))
        batch_op.drop_index('ix_measurement_arm_metric')

    op.drop_table('measurement')
    with op.batch_alter_table('probe_run', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_probe_run_attempt_id'))

    op.drop_table('probe_run')
    with op.batch_alter_table('verdict', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_verdict_gate_id'))
        batch_op.drop_index(batch_op.f('ix_verdict_campaign_id'))

    op.drop_table('verdict')
    with op.batch_alter_table('queue_item', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_queue_item_campaign_id'))

    op.drop_table('queue_item')
    with op.batch_alter_table('event', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_event_campaign_id'))

    op.drop_table('event')
    with op.batch_alter_table('attempt', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_attempt_item_key'))
        batch_op.drop_index(batch_op.f('ix_attempt_campaign_id'))
        batch_op.drop_index(batch_op.f('ix_attempt_arm_id'))

    op.drop_table('attempt')
    with op.batch_alter_table('arm', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_arm_campaign_id'))

    op.drop_table('arm')
    op.drop_table('runner')
    with op.batch_alter_table('campaign', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_campaign_name'))

    op.drop_table('campaign')
