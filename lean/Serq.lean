import Serq.Num
import Serq.IR
import Serq.Exec
import Serq.Claims
