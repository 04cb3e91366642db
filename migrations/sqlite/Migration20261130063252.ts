import { Migration } from '@mikro-orm/migrations';

/** Creates the library tables `saga_timer` and `saga_outbox` on SQLite. */
export class Migration20261130063252 extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create table \`saga_outbox\` (\`id\` text not null, \`saga_type\` text not null, \`saga_id\` text not null, \`message_type\` text not null, \`payload\` json not null, \`headers\` json not null, \`correlation_id\` text null, \`available_at\` datetime not null, \`token\` text not null, \`locked_until\` datetime null, \`attempts\` integer not null default 0, \`last_error\` text null, \`dispatched_at\` datetime null, \`outcome\` text null, \`dead_lettered_at\` datetime null, \`dead_letter_reason\` text null, \`created_at\` datetime not null, primary key (\`id\`));`,
    );
    this.addSql(`create index \`saga_outbox_dispatched_at_idx\` on \`saga_outbox\` (\`dispatched_at\`);`);
    this.addSql(`create index "saga_outbox_due_idx" on "saga_outbox" ("available_at") where "dispatched_at" is null;`);

    this.addSql(
      `create table \`saga_timer\` (\`id\` text not null, \`saga_type\` text not null, \`saga_id\` text not null, \`name\` text not null, \`step\` text null, \`due_at\` datetime not null, \`available_at\` datetime not null, \`message_type\` text not null, \`payload\` json not null, \`calendar_key\` text null, \`correlation_id\` text null, \`token\` text not null, \`locked_until\` datetime null, \`attempts\` integer not null default 0, \`last_error\` text null, \`dispatched_at\` datetime null, \`outcome\` text null, \`dead_lettered_at\` datetime null, \`dead_letter_reason\` text null, \`created_at\` datetime not null, primary key (\`id\`));`,
    );
    this.addSql(`create index \`saga_timer_dispatched_at_idx\` on \`saga_timer\` (\`dispatched_at\`);`);
    this.addSql(`create index "saga_timer_due_idx" on "saga_timer" ("available_at") where "dispatched_at" is null;`);
    this.addSql(
      `create unique index "saga_timer_pending_name_uniq" on "saga_timer" ("saga_type", "saga_id", "name") where "dispatched_at" is null;`,
    );
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists `saga_timer`;');
    this.addSql('drop table if exists `saga_outbox`;');
  }
}
