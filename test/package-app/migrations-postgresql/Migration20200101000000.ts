// The app's own migration, older than the library's: both run from this folder, in name order.
import { Migration } from '@mikro-orm/migrations';

export class Migration20200101000000 extends Migration {
  override async up(): Promise<void> {
    this.addSql('create table "app_note" ("id" integer not null primary key, "body" text not null);');
  }

  override async down(): Promise<void> {
    this.addSql('drop table "app_note";');
  }
}
