import { Migration } from '@mikro-orm/migrations';

export class Migration20250101000000 extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create table "customer" ("id" varchar(64) not null, "name" varchar(200) not null, constraint "customer_pkey" primary key ("id"));`,
    );
  }
}
