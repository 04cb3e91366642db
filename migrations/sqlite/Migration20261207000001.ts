import { Migration } from '@mikro-orm/migrations';

/**
 * Adds `trace_context` to `saga_timer` and `saga_outbox`: the W3C trace context current when the row was written, so
 * the delivery days later continues the trace that scheduled it (docs/observability.md).
 */
export class Migration20261207000001 extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table \`saga_outbox\` add column \`trace_context\` text null;`);

    this.addSql(`alter table \`saga_timer\` add column \`trace_context\` text null;`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table \`saga_outbox\` drop column \`trace_context\`;`);

    this.addSql(`alter table \`saga_timer\` drop column \`trace_context\`;`);
  }
}
