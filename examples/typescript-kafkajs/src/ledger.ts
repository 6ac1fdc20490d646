import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

/** One applied charge: the example's business write (sql/ledger.sql). */
@Entity({ name: 'ledger' })
export class LedgerEntry {
  @PrimaryGeneratedColumn({ type: 'bigint' })
  id: string;

  @Column({ name: 'event_id', type: 'uuid' })
  eventId: string;

  @Column({ name: 'consumer_group', type: 'text' })
  consumerGroup: string;

  @Column({ type: 'text' })
  account: string;

  @Column({ name: 'amount_cents', type: 'bigint' })
  amountCents: string;
}
