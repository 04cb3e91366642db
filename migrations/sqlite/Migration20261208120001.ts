import { Migration } from '@mikro-orm/migrations';

/**
 * Creates `saga_inbox` on SQLite: the deliveries an application stages for its sagas in its own transactions
 * (`SagaRuntime.stageDelivery`). `order_key` is the autoincremented rowid: SQLite writes one transaction at a time,
 * so the rows of one saga are numbered in commit order.
 */
export class Migration20261208120001 extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create table \`saga_inbox\` (\`order_key\` integer not null primary key autoincrement, \`id\` text not null, \`saga_type\` text not null, \`saga_key\` text not null, \`message_type\` text not null, \`payload\` json not null, \`message_id\` text null, \`correlation_id\` text null, \`available_at\` datetime not null, \`token\` text not null, \`locked_until\` datetime null, \`delivery_started_at\` datetime null, \`attempts\` integer not null default 0, \`last_error\` text null, \`dispatched_at\` datetime null, \`outcome\` text null, \`dead_lettered_at\` datetime null, \`dead_letter_reason\` text null, \`created_at\` datetime not null, \`trace_context\` text null);`,
    );
    this.addSql(`create unique index "saga_inbox_id_uniq" on "saga_inbox" ("id");`);
    this.addSql(`create index "saga_inbox_claim_idx" on "saga_inbox" ("available_at", "id") where "dispatched_at" is null;`);
    this.addSql(`create index "saga_inbox_saga_key_idx" on "saga_inbox" ("saga_type", "saga_key", "order_key") where "outcome" is null;`);
    this.addSql(`create index \`saga_inbox_dispatched_at_idx\` on \`saga_inbox\` (\`dispatched_at\`);`);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists `saga_inbox`;');
  }
}
