-- confirm_calls.lua: the server got the replies of these lease calls (and handed their
-- jobs to its streams): their leases now expire as failed attempts like any other
-- (attempts.lua, "Lost lease replies").
-- ARGV: [1] wake channel, [2 ..] call ids.
-- Reply: 0.
confirm_calls({ unpack(ARGV, 2) })
return 0
